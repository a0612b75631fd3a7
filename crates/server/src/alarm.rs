//! The memory alarm, as RabbitMQ's `vm_memory_high_watermark`: when the broker's resident memory
//! passes a fraction of the machine's, every connection is told (connection.blocked, to clients
//! that announced the capability) and connections that publish are no longer read from until
//! memory falls back under the mark. Consumers keep being read, so their acks can free memory.

use std::time::Duration;

use tokio::sync::watch;

/// How often memory is sampled: RabbitMQ's memory monitor checks every 2.5 s; a second keeps a
/// burst of publishes from getting far past the mark.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The text of connection.blocked, as RabbitMQ sends it.
pub const BLOCKED_REASON: &str = "low on memory";

/// The resident size above which the alarm is raised: `fraction` of `total_bytes`.
pub fn watermark_bytes(fraction: f64, total_bytes: u64) -> u64 {
    (fraction.clamp(0.0, 1.0) * total_bytes as f64) as u64
}

/// The machine's memory from /proc/meminfo (`MemTotal`), in bytes.
pub fn total_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Samples memory until every receiver is gone, raising and clearing the alarm on `alarm`.
pub async fn monitor(fraction: f64, alarm: watch::Sender<bool>) {
    let Some(total) = total_memory_bytes() else {
        tracing::warn!("cannot read /proc/meminfo: the memory alarm is off");
        // Keep the sender: connections wait on it.
        return std::future::pending().await;
    };
    let mark = watermark_bytes(fraction, total);
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    loop {
        ticks.tick().await;
        let resident = hourglass_mgmt::metrics::resident_memory_bytes();
        let raised = resident > mark;
        if raised != *alarm.borrow() {
            if raised {
                tracing::warn!(resident, watermark = mark, "memory alarm: blocking publishers");
            } else {
                tracing::info!(resident, watermark = mark, "memory alarm cleared");
            }
            if alarm.send(raised).is_err() {
                return;
            }
        }
        if alarm.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watermark is the fraction of total memory, clamped to 0..=1.
    #[test]
    fn watermark_is_a_clamped_fraction() {
        assert_eq!(watermark_bytes(0.4, 1000), 400);
        assert_eq!(watermark_bytes(2.0, 1000), 1000);
        assert_eq!(watermark_bytes(-1.0, 1000), 0);
    }

    /// This machine's total memory is readable (the alarm depends on it).
    #[test]
    fn total_memory_is_readable_on_linux() {
        assert!(total_memory_bytes().is_some_and(|t| t > 0));
    }
}
