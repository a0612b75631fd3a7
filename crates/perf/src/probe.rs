//! CPU time and resident memory of a process from `/proc` (Linux only): the broker's, when
//! `--broker-pid` is given, and the load tool's own, so every report says what the load cost.
//!
//! CPU is `utime + stime` (fields 14 and 15 of `/proc/PID/stat`) in clock ticks; ticks are
//! converted with `getconf CLK_TCK` (100 on Linux almost everywhere). RSS is `VmRSS` from
//! `/proc/PID/status`.

use std::process::Command;

use anyhow::{bail, Context};

/// The kernel's USER_HZ on every mainstream Linux build; used when `getconf` is missing.
const DEFAULT_CLK_TCK: u64 = 100;

/// One reading of a process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub cpu_ticks: u64,
    pub rss_kib: u64,
}

/// Reads a process's CPU and memory.
#[derive(Clone, Debug)]
pub struct Probe {
    pid: u32,
    ticks_per_s: u64,
}

/// What happened to a process between two samples.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub cpu_us: u64,
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
}

impl Probe {
    /// A probe for `pid`; fails if the process cannot be read now.
    pub fn new(pid: u32) -> anyhow::Result<Probe> {
        let probe = Probe { pid, ticks_per_s: clock_ticks_per_s() };
        probe.sample().with_context(|| format!("cannot read /proc/{pid}"))?;
        Ok(probe)
    }

    /// A probe for this process.
    pub fn myself() -> anyhow::Result<Probe> {
        Probe::new(std::process::id())
    }

    /// Reads CPU ticks and RSS now.
    pub fn sample(&self) -> anyhow::Result<Sample> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        Ok(Sample { cpu_ticks: parse_cpu_ticks(&stat)?, rss_kib: parse_rss_kib(&status)? })
    }

    /// RSS now, if the process can still be read.
    pub fn rss_kib(&self) -> Option<u64> {
        self.sample().ok().map(|s| s.rss_kib)
    }

    /// CPU spent and RSS at both ends between `start` and `end`.
    pub fn usage(&self, start: Sample, end: Sample) -> Usage {
        let ticks = end.cpu_ticks.saturating_sub(start.cpu_ticks);
        Usage {
            cpu_us: ticks.saturating_mul(1_000_000) / self.ticks_per_s.max(1),
            rss_start_kib: start.rss_kib,
            rss_end_kib: end.rss_kib,
        }
    }

    /// Microseconds per clock tick: the resolution of every CPU figure.
    pub fn resolution_us(&self) -> u64 {
        1_000_000 / self.ticks_per_s.max(1)
    }
}

/// `utime + stime` from a `/proc/PID/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted after its last `)`.
fn parse_cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let Some((_, after_comm)) = stat.rsplit_once(')') else {
        bail!("no ')' in /proc/PID/stat");
    };
    // After the name: field 3 (state) is index 0, so utime (14) is index 11, stime (15) index 12.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        fields.get(i).context("short /proc/PID/stat")?.parse::<u64>().context("bad tick count")
    };
    Ok(field(11)? + field(12)?)
}

/// `VmRSS` in KiB from `/proc/PID/status`.
fn parse_rss_kib(status: &str) -> anyhow::Result<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS line")?;
    let value = line.split_whitespace().nth(1).context("empty VmRSS line")?;
    value.parse().context("bad VmRSS value")
}

fn clock_ticks_per_s() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(DEFAULT_CLK_TCK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process name with spaces and parentheses does not shift the tick fields.
    #[test]
    fn cpu_ticks_are_counted_after_the_last_parenthesis() {
        let stat = "42 (beam (smp) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_ticks(stat).unwrap(), 300);
    }

    /// VmRSS is read in KiB.
    #[test]
    fn rss_is_read_from_status() {
        let status = "Name:\tx\nVmPeak:\t 9 kB\nVmRSS:\t   1234 kB\n";
        assert_eq!(parse_rss_kib(status).unwrap(), 1234);
    }

    /// This process can always be probed.
    #[test]
    fn probing_myself_works() {
        let probe = Probe::myself().unwrap();
        let sample = probe.sample().unwrap();
        assert!(sample.rss_kib > 0);
    }
}
