//! The node's resource alarms (RabbitMQ's memory and free-disk alarms) as one value: sampled by
//! the server's monitor, read by connections (to block publishers) and by the API (`/api/nodes`,
//! the alarm health checks, Prometheus).

use tokio::sync::watch;

/// The last sample of memory and disk, with the limits they are held against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceStatus {
    /// Resident memory of the broker process, in bytes.
    pub mem_used: u64,
    /// `vm_memory_high_watermark` as bytes; 0 while unknown.
    pub mem_limit: u64,
    pub mem_alarm: bool,
    /// Free space on the data directory's file system, in bytes.
    pub disk_free: u64,
    /// `disk_free_limit` in bytes.
    pub disk_free_limit: u64,
    pub disk_free_alarm: bool,
    /// Memory a restart would need to recover the messages in the log now (the server's
    /// estimate), and what it may take; past it the memory alarm is raised too, so that the
    /// broker never holds more than it can restart with.
    pub restart_mem_need: u64,
    pub restart_mem_limit: u64,
}

impl ResourceStatus {
    /// Whether any alarm is in effect (publishers are blocked).
    pub fn any_alarm(&self) -> bool {
        self.mem_alarm || self.disk_free_alarm
    }

    /// The alarmed resources, in RabbitMQ's names (`memory`, `disk`).
    pub fn alarmed_resources(&self) -> Vec<&'static str> {
        let mut resources = Vec::new();
        if self.mem_alarm {
            resources.push("memory");
        }
        if self.disk_free_alarm {
            resources.push("disk");
        }
        resources
    }

    /// The text of connection.blocked, as RabbitMQ's reader builds it ("low on memory",
    /// "low on disk", "low on memory & disk"); `None` without an alarm.
    pub fn blocked_reason(&self) -> Option<String> {
        let resources = self.alarmed_resources();
        (!resources.is_empty()).then(|| format!("low on {}", resources.join(" & ")))
    }
}

/// The receiving side every reader holds; the server's monitor owns the sender.
pub type ResourceWatch = watch::Receiver<ResourceStatus>;

/// The limits the monitor holds memory and disk against, in bytes. Set at start from the
/// configuration and changed at run time through the API (`routes/alarm_limits.rs`,
/// rabbitmqctl's `set_vm_memory_high_watermark` and `set_disk_free_limit`); not saved, as on
/// RabbitMQ: a restart goes back to the configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlarmLimits {
    /// The resident size above which the memory alarm is raised (0: off).
    pub mem_limit: u64,
    /// Free bytes under which the disk alarm is raised.
    pub disk_free_limit: u64,
}

/// Where the API changes the limits; the server's monitor holds the receiver.
pub type AlarmLimitsControl = watch::Sender<AlarmLimits>;

/// The resident size above which the alarm is raised: `fraction` of `total_bytes`.
pub fn watermark_bytes(fraction: f64, total_bytes: u64) -> u64 {
    (fraction.clamp(0.0, 1.0) * total_bytes as f64) as u64
}

/// A disk free limit given as a multiple of the machine's memory (RabbitMQ's `mem_relative`,
/// not limited to 1; negative counts as 0).
pub fn mem_relative_bytes(factor: f64, total_bytes: u64) -> u64 {
    (factor.max(0.0) * total_bytes as f64) as u64
}

/// The machine's memory from /proc/meminfo (`MemTotal`), in bytes.
pub fn total_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A size in RabbitMQ's notation: a number of bytes with an optional unit — `k`/`kiB`, `M`/`MiB`,
/// `G`/`GiB` are powers of 1024; `kB`, `MB`, `GB` powers of 1000 (rabbitmq.conf's data size type).
/// The error says what is wrong.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| format!("size {text:?}: expected a number of bytes"))?;
    let multiplier: u64 = match unit.trim() {
        "" => 1,
        "k" | "K" | "kiB" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!("size {text:?}: unknown unit {other:?} (k, kiB, M, MiB, G, GiB, kB, MB, GB)"))
        }
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"))
}

/// A watch that never changes: for a node without a monitor (tests, tools).
pub fn unmonitored() -> ResourceWatch {
    let (sender, receiver) = watch::channel(ResourceStatus::default());
    // Keep the value readable after the sender is gone: receivers still `borrow()` it.
    drop(sender);
    receiver
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

    /// connection.blocked names every alarmed resource as RabbitMQ does.
    #[test]
    fn blocked_reason_names_the_alarmed_resources() {
        let mut status = ResourceStatus::default();
        assert_eq!(status.blocked_reason(), None);
        status.mem_alarm = true;
        assert_eq!(status.blocked_reason().as_deref(), Some("low on memory"));
        status.disk_free_alarm = true;
        assert_eq!(status.blocked_reason().as_deref(), Some("low on memory & disk"));
        status.mem_alarm = false;
        assert_eq!(status.blocked_reason().as_deref(), Some("low on disk"));
        assert!(status.any_alarm());
    }
}
