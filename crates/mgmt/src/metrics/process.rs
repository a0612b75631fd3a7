//! What the OS says about this process, for the `rabbitmq_process_*` gauges: read from /proc at
//! scrape time (0 where there is no /proc).

/// File descriptors RabbitMQ keeps out of the socket budget for its own files (its
/// `?RESERVED_FOR_OTHERS` in file_handle_cache); we reserve the same for data files and logs.
const FDS_RESERVED_FOR_FILES: u64 = 100;

/// Resident set size in bytes.
pub fn resident_memory_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

/// Open file descriptors.
pub(crate) fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0)
}

/// The soft limit on open file descriptors (`ulimit -n`).
pub(crate) fn max_fds() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(0)
}

/// The sockets clients may hold, as RabbitMQ 3.x derives it from the descriptor limit: 90% of
/// what is left after the files' reserve.
pub(crate) fn max_tcp_sockets(max_fds: u64) -> u64 {
    max_fds.saturating_sub(FDS_RESERVED_FOR_FILES) * 9 / 10
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process has a descriptor limit and some open descriptors; the socket budget follows
    /// RabbitMQ's formula.
    #[test]
    fn descriptor_figures_come_from_proc() {
        if std::path::Path::new("/proc/self/limits").exists() {
            assert!(max_fds() > 0 && open_fds() > 0 && open_fds() <= max_fds());
        }
        assert_eq!(max_tcp_sockets(1024), 831);
        assert_eq!(max_tcp_sockets(50), 0);
    }
}
