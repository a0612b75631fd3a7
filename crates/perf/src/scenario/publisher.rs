//! A publishing worker: publishes `quota` messages to one queue (through the default exchange,
//! or an exchange that routes the queue's name to it), in batches written with one system call,
//! until the quota or the deadline. With confirms it keeps at most `window` messages unconfirmed
//! and reads acks when the window is full.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use hourglass_wire::{BasicProperties, BasicPublish, ConfirmSelect, Frame, Method};

use super::confirms::Confirms;
use super::CHANNEL;
use crate::client::{short, Client, PublishTemplate};

/// Messages encoded before one `write`: amortises the system call without delaying a paced
/// publisher noticeably (at 100 msg per batch a 16 B flow writes ~5 KiB at a time).
const PUBLISH_BATCH: u64 = 100;
/// Without confirms a publisher never has to read; it peeks at its socket this often
/// (in messages) to notice a channel.close instead of publishing into the void.
const PEEK_EVERY: u64 = 4096;
/// AMQP delivery-mode for persistent messages.
const PERSISTENT: u8 = 2;

/// Fills in each body just before it is encoded and may give that message properties of its own
/// (`None`: the spec's, encoded once for the run). Latency runs write the send time; scale runs
/// a due time, with an `x-delay` header or an expiration per message.
pub type Shape = Box<dyn FnMut(&mut [u8]) -> Option<BasicProperties> + Send>;

/// What a publisher is asked to do.
#[derive(Clone, Debug)]
pub struct PublisherSpec {
    /// The exchange published to; "" = the default exchange.
    pub exchange: String,
    /// The routing key: the queue's name (bindings made by this tool use it as their key).
    pub queue: String,
    pub quota: u64,
    pub duration: Duration,
    /// msg/s; 0 = as fast as possible.
    pub rate: u64,
    /// 0 = no confirms.
    pub confirm_window: u32,
    pub persistent: bool,
    pub size: usize,
}

/// What a publisher did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Published {
    pub published: u64,
    pub nacked: u64,
}

/// A connected publisher, ready to go.
pub struct Publisher {
    client: Client,
    publish: BasicPublish,
    template: PublishTemplate,
    spec: PublisherSpec,
}

impl Publisher {
    /// Connects a publisher: confirm.select if asked, and the pre-encoded publish frames.
    pub fn setup(mut client: Client, spec: PublisherSpec) -> anyhow::Result<Publisher> {
        if spec.confirm_window > 0 {
            match client.call(CHANNEL, ConfirmSelect::default())? {
                Method::ConfirmSelectOk(_) => {}
                other => bail!("expected confirm.select-ok, got {}", other.name()),
            }
        }
        let publish = BasicPublish {
            exchange: short(&spec.exchange)?,
            routing_key: short(&spec.queue)?,
            ..Default::default()
        };
        let template = encode(&client, &publish, &spec, BasicProperties::default());
        Ok(Publisher { client, publish, template, spec })
    }

    /// Publishes until quota or deadline, adding to `published` as it goes. `shape` fills in
    /// each body just before it is encoded and may give the message its own properties.
    pub fn run(
        mut self,
        published: &AtomicU64,
        abort: &AtomicBool,
        mut shape: Option<Shape>,
    ) -> anyhow::Result<Published> {
        let started = Instant::now();
        let deadline = started + self.spec.duration;
        let mut body = vec![0u8; self.spec.size];
        let mut confirms = (self.spec.confirm_window > 0).then(Confirms::new);
        let window = u64::from(self.spec.confirm_window);
        let mut sent = 0u64;
        let batch_max = if self.spec.rate > 0 { 1 } else { PUBLISH_BATCH };
        while sent < self.spec.quota && !abort.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if let Some(due) = self.due(started, sent) {
                if due > now {
                    std::thread::sleep(due - now);
                    continue;
                }
            }
            let mut batch = batch_max.min(self.spec.quota - sent);
            if let Some(confirms) = confirms.as_mut() {
                batch = batch.min(window.saturating_sub(confirms.outstanding() as u64));
                if batch == 0 {
                    self.read_confirms(confirms)?;
                    continue;
                }
            }
            for _ in 0..batch {
                match shape.as_mut().and_then(|shape| shape(&mut body)) {
                    Some(own) => {
                        let template = encode(&self.client, &self.publish, &self.spec, own);
                        self.client.publish(&template, &body);
                    }
                    None => self.client.publish(&self.template, &body),
                }
                if let Some(confirms) = confirms.as_mut() {
                    confirms.published();
                }
            }
            self.client.flush()?;
            published.fetch_add(batch, Ordering::Relaxed);
            let before = sent;
            sent += batch;
            if confirms.is_none() && before / PEEK_EVERY != sent / PEEK_EVERY {
                self.peek()?;
            }
        }
        let nacked = match confirms.as_mut() {
            Some(confirms) => self.settle_all(confirms, deadline)?,
            None => 0,
        };
        let _ = self.client.close();
        Ok(Published { published: sent, nacked })
    }

    /// When message number `sent` is due at the configured rate, if there is one.
    fn due(&self, started: Instant, sent: u64) -> Option<Instant> {
        if self.spec.rate == 0 {
            return None;
        }
        let offset_ns = u128::from(sent) * 1_000_000_000 / u128::from(self.spec.rate);
        Some(started + Duration::from_nanos(u64::try_from(offset_ns).unwrap_or(u64::MAX)))
    }

    /// Blocks for the next frame and applies it if it is a confirm.
    fn read_confirms(&mut self, confirms: &mut Confirms) -> anyhow::Result<()> {
        match self.client.next_frame()? {
            Some(Frame::Method { method: Method::BasicAck(ack), .. }) => {
                confirms.settle(ack.delivery_tag, ack.multiple, false)
            }
            Some(Frame::Method { method: Method::BasicNack(nack), .. }) => {
                confirms.settle(nack.delivery_tag, nack.multiple, true)
            }
            _ => {}
        }
        Ok(())
    }

    /// Waits (bounded) for the confirms of everything sent; returns the nack count.
    fn settle_all(&mut self, confirms: &mut Confirms, deadline: Instant) -> anyhow::Result<u64> {
        let give_up = deadline.max(Instant::now()) + Duration::from_secs(30);
        while confirms.outstanding() > 0 && Instant::now() < give_up {
            self.read_confirms(confirms)?;
        }
        if confirms.outstanding() > 0 {
            bail!("{} publishes still unconfirmed 30 s after publishing stopped", confirms.outstanding());
        }
        Ok(confirms.nacked)
    }

    /// Reads whatever the broker sent without blocking; errors out on a close.
    fn peek(&mut self) -> anyhow::Result<()> {
        while let Some(frame) = self.client.poll_frame()? {
            if let Frame::Method { method: Method::ConnectionBlocked(blocked), .. } = frame {
                eprintln!("publisher: broker blocked the connection: {}", blocked.reason);
            }
        }
        Ok(())
    }
}

/// The publish frames for messages with `properties` and the spec's delivery mode.
fn encode(
    client: &Client,
    publish: &BasicPublish,
    spec: &PublisherSpec,
    properties: BasicProperties,
) -> PublishTemplate {
    let properties = BasicProperties { delivery_mode: spec.persistent.then_some(PERSISTENT), ..properties };
    client.publish_template(CHANNEL, publish.clone(), properties, spec.size)
}
