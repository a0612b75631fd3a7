//! The resource alarms, as RabbitMQ's `vm_memory_high_watermark` and `disk_free_limit`: when the
//! broker's resident memory passes a fraction of the machine's, or free space on the data
//! directory's file system falls under the limit, every connection is told (connection.blocked,
//! to clients that announced the capability) and connections that publish are no longer read
//! from until the alarm clears. Consumers keep being read, so their acks can free memory.

use std::path::Path;
use std::time::Duration;

use hourglass_mgmt::resources::ResourceStatus;
use tokio::sync::watch;

/// How often memory and disk are sampled: RabbitMQ's memory monitor checks every 2.5 s and its
/// disk monitor every 10 s at most; a second keeps a burst of publishes from getting far past
/// either mark.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

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

/// Bytes available to an unprivileged writer on the file system holding `path`.
pub fn disk_free_bytes(path: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(path).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// The limits the monitor holds memory and disk against.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Fraction of the machine's memory (`vm_memory_high_watermark`).
    pub memory_fraction: f64,
    /// Free bytes under which the disk alarm is raised (`disk_free_limit`).
    pub disk_free_limit: u64,
}

/// One sample against the limits: the new status, given resident and free bytes.
pub fn evaluate(
    mem_used: u64,
    mem_limit: u64,
    disk_free: Option<u64>,
    disk_free_limit: u64,
) -> ResourceStatus {
    ResourceStatus {
        mem_used,
        mem_limit,
        // 0 means the machine's memory is unknown: no memory alarm then.
        mem_alarm: mem_limit > 0 && mem_used > mem_limit,
        disk_free: disk_free.unwrap_or(0),
        disk_free_limit,
        // An unreadable file system raises no alarm: RabbitMQ's disk monitor also stays quiet
        // when it cannot measure.
        disk_free_alarm: disk_free.is_some_and(|free| free < disk_free_limit),
    }
}

/// Samples memory and the data directory's disk until every receiver is gone, raising and
/// clearing the alarms on `status` (receivers are woken only when an alarm changes; the figures
/// are refreshed every sample).
pub async fn monitor(limits: Limits, data_dir: std::path::PathBuf, status: watch::Sender<ResourceStatus>) {
    let mem_limit = match total_memory_bytes() {
        Some(total) => watermark_bytes(limits.memory_fraction, total),
        None => {
            tracing::warn!("cannot read /proc/meminfo: the memory alarm is off");
            0
        }
    };
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    loop {
        ticks.tick().await;
        let sample = evaluate(
            hourglass_mgmt::metrics::resident_memory_bytes(),
            mem_limit,
            disk_free_bytes(&data_dir),
            limits.disk_free_limit,
        );
        status.send_if_modified(|current| {
            let changed =
                current.mem_alarm != sample.mem_alarm || current.disk_free_alarm != sample.disk_free_alarm;
            if changed {
                log_change(current, &sample);
            }
            *current = sample;
            changed
        });
        if status.is_closed() {
            return;
        }
    }
}

fn log_change(before: &ResourceStatus, after: &ResourceStatus) {
    if before.mem_alarm != after.mem_alarm {
        if after.mem_alarm {
            tracing::warn!(
                resident = after.mem_used,
                watermark = after.mem_limit,
                "memory alarm: blocking publishers"
            );
        } else {
            tracing::info!(resident = after.mem_used, watermark = after.mem_limit, "memory alarm cleared");
        }
    }
    if before.disk_free_alarm != after.disk_free_alarm {
        if after.disk_free_alarm {
            tracing::warn!(
                free = after.disk_free,
                limit = after.disk_free_limit,
                "disk alarm: blocking publishers"
            );
        } else {
            tracing::info!(free = after.disk_free, limit = after.disk_free_limit, "disk alarm cleared");
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

    /// Each alarm is raised past its own limit, and only there.
    #[test]
    fn alarms_are_raised_past_their_limits() {
        let quiet = evaluate(100, 200, Some(1000), 500);
        assert!(!quiet.any_alarm());
        let memory = evaluate(201, 200, Some(1000), 500);
        assert!(memory.mem_alarm && !memory.disk_free_alarm);
        let disk = evaluate(100, 200, Some(499), 500);
        assert!(disk.disk_free_alarm && !disk.mem_alarm);
        assert_eq!(disk.disk_free, 499);
        // Unknown memory total or unreadable disk: no alarm rather than a blocked broker.
        assert!(!evaluate(u64::MAX, 0, None, 500).any_alarm());
    }

    /// The data directory's file system reports free space (the disk alarm depends on it).
    #[test]
    fn disk_free_is_readable_for_the_temp_dir() {
        assert!(disk_free_bytes(&std::env::temp_dir()).is_some_and(|free| free > 0));
    }

    /// This machine's total memory is readable (the alarm depends on it).
    #[test]
    fn total_memory_is_readable_on_linux() {
        assert!(total_memory_bytes().is_some_and(|t| t > 0));
    }
}
