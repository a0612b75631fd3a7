//! A consuming worker: basic.qos + basic.consume on one queue, then counts deliveries until told
//! to stop. Manual acks go out as one basic.ack (multiple) every K deliveries, batched into the
//! next write. For latency runs it reads the send time from the first 8 body octets.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use anyhow::bail;
use hourglass_wire::{BasicAck, BasicConsume, BasicQos, FieldTable, Frame, Method};

use super::CHANNEL;
use crate::client::{short, Client};

/// Octets of the send timestamp at the start of a latency body (ns since the run's epoch, BE).
pub const STAMP_LEN: usize = 8;
/// Latency samples kept per consumer: bounds memory (8 B each) on long or fast runs.
const MAX_LATENCY_SAMPLES: usize = 10_000_000;

/// What a consumer is asked to do.
#[derive(Clone, Debug)]
pub struct ConsumerSpec {
    pub queue: String,
    pub auto_ack: bool,
    /// basic.qos prefetch-count; 0 = unlimited.
    pub prefetch: u16,
    /// One ack per this many deliveries (manual ack only).
    pub ack_every: u32,
    /// Read send times from bodies, relative to this epoch.
    pub latency_epoch: Option<Instant>,
}

/// What a consumer saw.
#[derive(Clone, Debug, Default)]
pub struct Consumed {
    pub consumed: u64,
    /// Latencies in ns (latency runs only).
    pub latencies_ns: Vec<u64>,
}

/// A consumer whose basic.consume has been accepted.
pub struct Consumer {
    client: Client,
    spec: ConsumerSpec,
}

impl Consumer {
    /// basic.qos (manual ack only) and basic.consume, waiting for consume-ok.
    pub fn setup(mut client: Client, spec: ConsumerSpec) -> anyhow::Result<Consumer> {
        if spec.ack_every == 0 {
            bail!("--ack-every must be at least 1");
        }
        if !spec.auto_ack && spec.prefetch != 0 && u32::from(spec.prefetch) < spec.ack_every {
            bail!("prefetch {} < ack-every {}: the consumer would stall", spec.prefetch, spec.ack_every);
        }
        if !spec.auto_ack {
            let qos = BasicQos { prefetch_count: spec.prefetch, ..Default::default() };
            client.call(CHANNEL, qos)?;
        }
        let consume = BasicConsume {
            queue: short(&spec.queue)?,
            no_ack: spec.auto_ack,
            arguments: FieldTable::new(),
            ..Default::default()
        };
        match client.call(CHANNEL, consume)? {
            Method::BasicConsumeOk(_) => Ok(Consumer { client, spec }),
            other => bail!("expected basic.consume-ok, got {}", other.name()),
        }
    }

    /// Counts deliveries into `consumed` until `stop` is set.
    pub fn run(mut self, consumed: &AtomicU64, stop: &AtomicBool) -> anyhow::Result<Consumed> {
        let mut outcome = Consumed::default();
        let mut unacked = 0u32;
        let mut last_tag = 0u64;
        let mut want_stamp = false;
        while !stop.load(Ordering::Relaxed) {
            match self.client.next_frame()? {
                Some(Frame::Method { method: Method::BasicDeliver(deliver), .. }) => {
                    outcome.consumed += 1;
                    consumed.fetch_add(1, Ordering::Relaxed);
                    want_stamp = self.spec.latency_epoch.is_some();
                    if !self.spec.auto_ack {
                        last_tag = deliver.delivery_tag;
                        unacked += 1;
                        if unacked >= self.spec.ack_every {
                            self.ack(last_tag);
                            unacked = 0;
                        }
                    }
                }
                Some(Frame::Body { payload, .. }) if want_stamp => {
                    want_stamp = false;
                    if let (Some(epoch), Some(stamp)) = (self.spec.latency_epoch, payload.get(..STAMP_LEN)) {
                        let mut octets = [0u8; STAMP_LEN];
                        octets.copy_from_slice(stamp);
                        let sent_ns = u64::from_be_bytes(octets);
                        let now_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        if outcome.latencies_ns.len() < MAX_LATENCY_SAMPLES {
                            outcome.latencies_ns.push(now_ns.saturating_sub(sent_ns));
                        }
                    }
                }
                Some(Frame::Method { method: Method::BasicCancel(_), .. }) => {
                    bail!("broker cancelled the consumer on {}", self.spec.queue)
                }
                Some(_) | None => {}
            }
        }
        if unacked > 0 {
            self.ack(last_tag);
            self.client.flush()?;
        }
        let _ = self.client.close();
        Ok(outcome)
    }

    fn ack(&mut self, tag: u64) {
        let multiple = self.spec.ack_every > 1;
        self.client.send(CHANNEL, &BasicAck { delivery_tag: tag, multiple }.into());
    }
}
