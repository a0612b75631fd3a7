//! The measured window of a run: wall time, the broker's CPU and RSS (with `--broker-pid`) and
//! the load tool's own CPU, sampled when the load starts and when the last message is in.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::probe::{Probe, Sample, Usage};

/// Samples taken when the window opened.
pub struct Window {
    started: Instant,
    broker: Option<(Probe, Sample)>,
    me: (Probe, Sample),
}

/// What the window measured.
pub struct Measured {
    pub elapsed: Duration,
    pub broker: Option<Usage>,
    pub client: Usage,
    /// Resolution of the CPU figures (one clock tick), in µs.
    pub cpu_resolution_us: u64,
}

impl Window {
    /// Opens the window now.
    pub fn open(broker: Option<&Probe>) -> anyhow::Result<Window> {
        let me = Probe::myself()?;
        let broker = match broker {
            Some(probe) => Some((probe.clone(), probe.sample()?)),
            None => None,
        };
        let my_start = me.sample()?;
        Ok(Window { started: Instant::now(), broker, me: (me, my_start) })
    }

    /// Closes the window now.
    pub fn close(self) -> anyhow::Result<Measured> {
        let elapsed = self.started.elapsed();
        let client = self.me.0.usage(self.me.1, self.me.0.sample()?);
        let cpu_resolution_us = self.me.0.resolution_us();
        let broker = match self.broker {
            Some((probe, start)) => Some(probe.usage(start, probe.sample()?)),
            None => None,
        };
        Ok(Measured { elapsed, broker, client, cpu_resolution_us })
    }
}

impl Measured {
    /// Operations (messages, gets) per second over the window.
    pub fn rate_per_s(&self, operations: u64) -> f64 {
        operations as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// Broker CPU µs per operation, if the broker was probed.
    pub fn broker_cpu_us_per(&self, operations: u64) -> Option<f64> {
        self.broker.map(|usage| usage.cpu_us as f64 / operations.max(1) as f64)
    }

    /// The load tool's CPU µs per operation.
    pub fn client_cpu_us_per(&self, operations: u64) -> f64 {
        self.client.cpu_us as f64 / operations.max(1) as f64
    }

    /// The common JSON fields for `operations` operations.
    pub fn json(&self, operations: u64) -> Value {
        json!({
            "elapsed_s": round3(self.elapsed.as_secs_f64()),
            "rate_per_s": round3(self.rate_per_s(operations)),
            "broker_cpu_ms": self.broker.map(|u| u.cpu_us as f64 / 1000.0),
            "broker_cpu_us_per_op": self.broker_cpu_us_per(operations).map(round3),
            "broker_rss_start_kib": self.broker.map(|u| u.rss_start_kib),
            "broker_rss_end_kib": self.broker.map(|u| u.rss_end_kib),
            "client_cpu_us_per_op": round3(self.client_cpu_us_per(operations)),
            "cpu_resolution_us": self.cpu_resolution_us,
        })
    }

    /// The common human-readable part, e.g. `12345 msg/s, broker 20.1 µs CPU/msg, rss 8 MiB`.
    pub fn human(&self, operations: u64, unit: &str) -> String {
        let mut line =
            format!("{:.0} {unit}/s over {:.2}s", self.rate_per_s(operations), self.elapsed.as_secs_f64());
        if let (Some(usage), Some(per)) = (self.broker, self.broker_cpu_us_per(operations)) {
            line += &format!(
                ", broker {per:.2} µs CPU/{unit}, rss {:.1} → {:.1} MiB",
                usage.rss_start_kib as f64 / 1024.0,
                usage.rss_end_kib as f64 / 1024.0
            );
        }
        line += &format!(", client {:.2} µs CPU/{unit}", self.client_cpu_us_per(operations));
        line
    }
}

/// Three decimals are plenty for reports and keep the JSON short.
pub fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The value at quantile `q` (0..=1) of sorted samples, nearest-rank; the default (0) when empty.
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    /// Nearest-rank percentiles: p50 of 1..=100 is 50, p99 is 99, max is 100.
    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 0.5), 50);
        assert_eq!(percentile(&samples, 0.99), 99);
        assert_eq!(percentile(&samples, 1.0), 100);
        assert_eq!(percentile::<u64>(&[], 0.5), 0);
    }
}
