//! The resource alarms, as RabbitMQ's `vm_memory_high_watermark` and `disk_free_limit`: when the
//! broker's resident memory passes a fraction of the machine's, or free space on the data
//! directory's file system falls under the limit, every connection is told (connection.blocked,
//! to clients that announced the capability) and connections that publish are no longer read
//! from until the alarm clears. Consumers keep being read, so their acks can free memory.
//!
//! Unfinished messages count too: a connection in the middle of a message is not read while an
//! alarm is up (RabbitMQ blocks a connection as soon as it publishes under an alarm), and the
//! body bytes all connections hold for unfinished messages, and those they publish
//! ([`InboundContent`]), wake the monitor each time they grow by [`RECHECK_STEP_BYTES`], so a flood
//! of bodies, partial or not, cannot outrun the sampling. Close to a limit the monitor samples every [`FAST_CHECK_INTERVAL`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hourglass_mgmt::resources::{total_memory_bytes, watermark_bytes, AlarmLimits, ResourceStatus};
use tokio::sync::{watch, Notify};

/// How often memory and disk are sampled far from their limits: RabbitMQ's memory monitor
/// checks every 2.5 s and its disk monitor every 10 s at most; a second costs nothing.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How often they are sampled near a limit (or while an alarm is up): at 1 s a burst of
/// publishes overshot the memory watermark twice over and filled a small disk before the alarm.
/// A sample reads /proc/self/statm and calls statvfs, some microseconds: 10 a second is free.
pub const FAST_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// Memory is near its limit past this fraction of the watermark.
pub const MEMORY_NEAR_FRACTION: f64 = 0.8;
/// Free disk is near its limit under twice the limit, or under the limit plus this much: a
/// writer at disk speed covers 256 MiB in well under a second.
pub const DISK_NEAR_MARGIN_BYTES: u64 = 256 * 1024 * 1024;
/// What recovering one live message costs at its peak beyond what the running broker holds for
/// it: recovery reads the live messages back one at a time (`Store::replay`), so its peak is the
/// live index being rebuilt, a hash table of 17 B buckets that holds its old and new tables at
/// once while it doubles: at most 3 buckets of 17 B for each 7/8 of a bucket filled, 58 B per
/// message at the worst moment. Measured 43.9 B at 10M and 61.4 B at 30M (VmHWM 1,757 MiB, the
/// table caught doubling; docs/benchmarks.md), 217 B before the two-pass recovery; a quarter
/// more for the rest of the process.
pub const RESTART_BYTES_PER_MESSAGE: u64 = 80;
/// The share of the machine's memory a restart may take. Past it the memory alarm blocks
/// publishers even though the running broker is far under its watermark (a far-future delayed
/// message costs ~30 B while running, ADR 0013): a node must always be able to start again.
pub const RESTART_MEMORY_FRACTION: f64 = 0.8;

/// Growth of the unfinished-message bytes held by all connections, or of the bytes they publish,
/// that triggers a sample at once: small beside any watermark, large enough that even 1 GB/s of
/// publishing costs ~125 samples a second (a few ms of CPU).
pub const RECHECK_STEP_BYTES: u64 = 8 * 1024 * 1024;

/// What clients push into the broker, shared by the connection tasks and the monitor: the body
/// bytes all connections hold for messages not yet complete (the sum of each session's
/// `unfinished_content().received_bytes`), and a running total of published body bytes (what
/// makes queues grow). Either passing a multiple of [`RECHECK_STEP_BYTES`] upwards wakes the
/// monitor, so memory is sampled as it is taken rather than a second later.
#[derive(Debug, Default)]
pub struct InboundContent {
    held_bytes: AtomicU64,
    published_bytes: AtomicU64,
    grown: Notify,
}

impl InboundContent {
    /// One connection's unfinished messages went from `before` to `after` bytes. True when the
    /// monitor was woken (the caller should let it run).
    pub fn update_held(&self, before: u64, after: u64) -> bool {
        if after > before {
            return self.grow(&self.held_bytes, after - before);
        }
        self.held_bytes.fetch_sub(before - after, Ordering::AcqRel);
        false
    }

    /// A connection handed the broker messages with `bytes` of bodies. True when the monitor
    /// was woken.
    pub fn add_published(&self, bytes: u64) -> bool {
        self.grow(&self.published_bytes, bytes)
    }

    /// The bytes held for unfinished messages now.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::Acquire)
    }

    fn grow(&self, counter: &AtomicU64, bytes: u64) -> bool {
        let old = counter.fetch_add(bytes, Ordering::AcqRel);
        let stepped = old.wrapping_add(bytes) / RECHECK_STEP_BYTES > old / RECHECK_STEP_BYTES;
        if stepped {
            self.grown.notify_one();
        }
        stepped
    }
}

/// How long until the next sample, given the last one: fast near a limit or in alarm.
pub fn next_check(status: &ResourceStatus) -> Duration {
    let memory_near =
        status.mem_limit > 0 && status.mem_used as f64 >= status.mem_limit as f64 * MEMORY_NEAR_FRACTION;
    let near_disk =
        status.disk_free_limit.saturating_mul(2).max(status.disk_free_limit + DISK_NEAR_MARGIN_BYTES);
    // disk_free 0 with a limit of 0 means unmeasured and unlimited: not near.
    let disk_near = status.disk_free_limit > 0 && status.disk_free < near_disk;
    if status.any_alarm() || memory_near || disk_near {
        FAST_CHECK_INTERVAL
    } else {
        CHECK_INTERVAL
    }
}

/// Bytes available to an unprivileged writer on the file system holding `path`.
pub fn disk_free_bytes(path: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(path).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// The limits at start: the watermark as a fraction of the machine's memory, the disk limit in
/// bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Fraction of the machine's memory (`vm_memory_high_watermark`).
    pub memory_fraction: f64,
    /// Free bytes under which the disk alarm is raised (`disk_free_limit`).
    pub disk_free_limit: u64,
}

impl Limits {
    /// In bytes, as the monitor holds them (the memory alarm is off when the machine's memory
    /// cannot be read).
    pub fn in_bytes(&self) -> AlarmLimits {
        let mem_limit = match total_memory_bytes() {
            Some(total) => watermark_bytes(self.memory_fraction, total),
            None => {
                tracing::warn!("cannot read /proc/meminfo: the memory alarm is off");
                0
            }
        };
        AlarmLimits { mem_limit, disk_free_limit: self.disk_free_limit }
    }
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
        // Added by `with_restart_need`.
        restart_mem_need: 0,
        restart_mem_limit: 0,
    }
}

/// What a restart would need to recover `stored_messages`, and what it may take of `total`
/// memory (0 while unknown: no alarm then).
pub fn restart_memory(stored_messages: u64, total: Option<u64>) -> (u64, u64) {
    let need = stored_messages.saturating_mul(RESTART_BYTES_PER_MESSAGE);
    (need, total.map_or(0, |total| (total as f64 * RESTART_MEMORY_FRACTION) as u64))
}

/// Adds the restart need to a sample: past its limit the memory alarm is up.
pub fn with_restart_need(mut sample: ResourceStatus, need: u64, limit: u64) -> ResourceStatus {
    sample.restart_mem_need = need;
    sample.restart_mem_limit = limit;
    sample.mem_alarm |= limit > 0 && need > limit;
    sample
}

/// Samples memory and the data directory's disk until every receiver is gone, raising and
/// clearing the alarms on `status` (receivers are woken only when an alarm changes; the figures
/// are refreshed every sample). Samples every [`next_check`], and at once when `inbound` grows
/// by a step.
pub async fn monitor(
    mut limits: watch::Receiver<AlarmLimits>,
    data_dir: std::path::PathBuf,
    inbound: std::sync::Arc<InboundContent>,
    stored_messages: std::sync::Arc<AtomicU64>,
    status: watch::Sender<ResourceStatus>,
) {
    let total = total_memory_bytes();
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = inbound.grown.notified() => {}
            // A limit changed through the API: sample against it at once.
            Ok(()) = limits.changed() => {}
        }
        let current = *limits.borrow_and_update();
        let (need, limit) = restart_memory(stored_messages.load(Ordering::Relaxed), total);
        let sample = with_restart_need(
            evaluate(
                hourglass_mgmt::metrics::resident_memory_bytes(),
                current.mem_limit,
                disk_free_bytes(&data_dir),
                current.disk_free_limit,
            ),
            need,
            limit,
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
        wait = next_check(&sample);
        if status.is_closed() {
            return;
        }
    }
}

fn log_change(before: &ResourceStatus, after: &ResourceStatus) {
    if before.mem_alarm != after.mem_alarm {
        if after.mem_alarm && after.mem_used <= after.mem_limit {
            tracing::warn!(
                restart_need = after.restart_mem_need,
                restart_limit = after.restart_mem_limit,
                resident = after.mem_used,
                "memory alarm: blocking publishers; a restart would need more memory than this \
                 machine has to recover the messages stored (consume some, or add memory)"
            );
        } else if after.mem_alarm {
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

    /// The memory alarm is also up when a restart would need more than its share of the
    /// machine's memory to recover the stored messages, however little the broker holds now
    /// (issue 23: 100M far-future delayed messages took 2.2 GiB running, and the restart was
    /// killed for want of memory at 24 GiB when recovery held them all; 400M would not fit
    /// even now).
    #[test]
    fn a_restart_that_would_not_fit_raises_the_memory_alarm() {
        const GIB: u64 = 1 << 30;
        let (need, limit) = restart_memory(400_000_000, Some(24 * GIB));
        assert_eq!(need, 400_000_000 * RESTART_BYTES_PER_MESSAGE);
        assert!(need > limit);
        let sample = with_restart_need(evaluate(2 * GIB, 9 * GIB, Some(GIB), 500), need, limit);
        assert!(sample.mem_alarm && sample.any_alarm());
        assert_eq!((sample.restart_mem_need, sample.restart_mem_limit), (need, limit));
        let (need, limit) = restart_memory(100_000_000, Some(24 * GIB));
        assert!(!with_restart_need(evaluate(2 * GIB, 9 * GIB, Some(GIB), 500), need, limit).any_alarm());
        // Unknown total memory: no restart alarm.
        let (need, limit) = restart_memory(u64::MAX, None);
        assert!(!with_restart_need(evaluate(0, 0, None, 0), need, limit).any_alarm());
    }

    /// Sampling speeds up near either limit and while an alarm is up, and is slow otherwise.
    #[test]
    fn sampling_is_fast_near_a_limit() {
        const MIB: u64 = 1024 * 1024;
        let far = evaluate(100, 1000, Some(10_000 * MIB), 50 * MIB);
        assert_eq!(next_check(&far), CHECK_INTERVAL);
        assert_eq!(next_check(&evaluate(799, 1000, Some(10_000 * MIB), 50 * MIB)), CHECK_INTERVAL);
        assert_eq!(next_check(&evaluate(800, 1000, Some(10_000 * MIB), 50 * MIB)), FAST_CHECK_INTERVAL);
        assert_eq!(next_check(&evaluate(1001, 1000, Some(10_000 * MIB), 50 * MIB)), FAST_CHECK_INTERVAL);
        // A 64 MiB disk with the default 50 MB limit is always near it.
        assert_eq!(next_check(&evaluate(100, 1000, Some(64 * MIB), 50_000_000)), FAST_CHECK_INTERVAL);
        assert_eq!(next_check(&evaluate(100, 1000, Some(300 * MIB), 50 * MIB)), FAST_CHECK_INTERVAL);
        assert_eq!(next_check(&evaluate(100, 1000, Some(307 * MIB), 50 * MIB)), CHECK_INTERVAL);
        // A big limit: near under twice of it.
        assert_eq!(next_check(&evaluate(100, 1000, Some(1900 * MIB), 1000 * MIB)), FAST_CHECK_INTERVAL);
        // Unknown memory and an unreadable disk are never near.
        assert_eq!(next_check(&evaluate(u64::MAX, 0, None, 0)), CHECK_INTERVAL);
    }

    /// Held bytes add up across connections, and the monitor is woken each time the total
    /// passes a step upwards (not when it shrinks).
    #[tokio::test]
    async fn held_content_wakes_the_monitor_at_each_step() {
        let held = InboundContent::default();
        assert!(!held.update_held(0, RECHECK_STEP_BYTES - 1));
        assert!(!woken(&held).await);
        assert!(held.update_held(0, 1));
        assert_eq!(held.held_bytes(), RECHECK_STEP_BYTES);
        assert!(woken(&held).await, "passed the first step");
        assert!(!held.update_held(RECHECK_STEP_BYTES - 1, 0));
        assert!(!held.update_held(1, 0));
        assert_eq!(held.held_bytes(), 0);
        assert!(!woken(&held).await, "shrinking wakes nobody");
        assert!(held.update_held(0, 3 * RECHECK_STEP_BYTES));
        assert!(woken(&held).await);
    }

    /// Published bytes wake the monitor at each step of their running total.
    #[tokio::test]
    async fn published_content_wakes_the_monitor_at_each_step() {
        let inbound = InboundContent::default();
        let message = RECHECK_STEP_BYTES / 4;
        let woke: Vec<bool> = (0..8).map(|_| inbound.add_published(message)).collect();
        assert_eq!(woke, [false, false, false, true, false, false, false, true]);
        assert!(woken(&inbound).await);
        assert_eq!(inbound.held_bytes(), 0, "published bytes are not held");
    }

    async fn woken(inbound: &InboundContent) -> bool {
        tokio::time::timeout(Duration::from_millis(1), inbound.grown.notified()).await.is_ok()
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
