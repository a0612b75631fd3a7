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
