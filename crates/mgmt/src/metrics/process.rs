//! What the OS says about this process, for the `rabbitmq_process_*` gauges: read from /proc at
//! scrape time (0 where there is no /proc).

/// File descriptors RabbitMQ keeps out of the socket budget for its own files (its
/// `?RESERVED_FOR_OTHERS` in file_handle_cache); we reserve the same for data files and logs.
const FDS_RESERVED_FOR_FILES: u64 = 100;

/// Resident set size in bytes (the memory alarm's measure, `mem_used`,
/// `rabbitmq_process_resident_memory_bytes`): resident pages times the page size, which is 16 KiB
/// or 64 KiB on some ARM64 and POWER kernels, not always 4 KiB.
pub fn resident_memory_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    resident_bytes_from_statm(&statm, rustix::param::page_size() as u64)
}

/// Bytes resident by the second field of a `/proc/<pid>/statm` line (pages); 0 if it does not read.
fn resident_bytes_from_statm(statm: &str, page_size: u64) -> u64 {
    let pages = statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0);
    pages.saturating_mul(page_size)
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

    /// Resident pages are counted in the kernel's page size, whatever it is (issue 25: pages were
    /// multiplied by 4096, which under-reads RSS four times over on a 16 KiB-page kernel).
    #[test]
    fn resident_bytes_use_the_page_size() {
        let statm = "12000 300 150 20 0 900 0\n";
        assert_eq!(resident_bytes_from_statm(statm, 16384), 300 * 16384);
        assert_eq!(resident_bytes_from_statm(statm, 4096), 300 * 4096);
        assert_eq!(resident_bytes_from_statm("", 4096), 0);
    }

    /// What this process reports equals the kernel's own `VmRSS` (in KiB) within a little growth
    /// between the two reads.
    #[test]
    fn resident_memory_matches_vm_rss() {
        let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return };
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
        let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS in kB");
        let reported = resident_memory_bytes();
        let vm_rss = kib * 1024;
        assert!(reported.abs_diff(vm_rss) <= vm_rss / 10, "statm says {reported}, VmRSS {vm_rss}");
    }
}
