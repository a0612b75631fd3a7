//! `idle-connections`: opens N connections (each with one open channel, heartbeats off) and
//! holds them. Broker memory per connection = RSS growth from before the first connect to the
//! end of the hold, ÷ N; the broker's CPU over the window covers the handshakes and idling.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use super::Run;
use crate::cli::IdleArgs;
use crate::measure::{round3, Window};
use crate::probe::Probe;
use crate::report;

/// A bound on N: each connection is a socket (file descriptor) in this process too.
const MAX_CONNECTIONS: u32 = 50_000;
/// Progress while connecting, every this many connections.
const PROGRESS_EVERY: u32 = 100;
/// Before the baseline, wait until the broker's RSS moves less than this between two samples:
/// a garbage-collected broker (RabbitMQ) may still be returning memory from an earlier run,
/// which would make per-connection growth come out too small, even negative.
const SETTLED_RSS_DELTA_KIB: u64 = 256;
/// Time between those samples.
const SETTLE_STEP: Duration = Duration::from_millis(500);
/// The longest the settling may take; past it the baseline is taken anyway (and said so).
const SETTLE_LIMIT: Duration = Duration::from_secs(15);

pub fn run(run: &Run, args: &IdleArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.connections > MAX_CONNECTIONS {
        bail!("--connections must be within 1..={MAX_CONNECTIONS}");
    }
    if let Some(probe) = run.broker.as_ref() {
        settle(probe)?;
    }
    let window = Window::open(run.broker.as_ref())?;
    let connecting = Instant::now();
    let mut clients = Vec::with_capacity(args.connections as usize);
    for i in 0..args.connections {
        clients.push(run.connect()?);
        if (i + 1) % PROGRESS_EVERY == 0 {
            eprintln!("[{:>5.1}s] {} connections open", connecting.elapsed().as_secs_f64(), i + 1);
        }
    }
    let connect_s = connecting.elapsed().as_secs_f64();
    eprintln!("holding {} connections for {} s", clients.len(), args.hold_s);
    std::thread::sleep(Duration::from_secs_f64(args.hold_s));
    let measured = window.close()?;
    for client in clients {
        let _ = client.close();
    }

    let n = args.connections;
    let per_conn_kib =
        measured.broker.map(|usage| (usage.rss_end_kib as f64 - usage.rss_start_kib as f64) / f64::from(n));
    let mut human =
        format!("{n} connections opened in {connect_s:.2}s ({:.0}/s)", f64::from(n) / connect_s.max(1e-9));
    if let (Some(per), Some(usage)) = (per_conn_kib, measured.broker) {
        human += &format!(
            ", broker {per:.1} KiB RSS per connection ({:.1} → {:.1} MiB), {:.1} ms CPU in the window",
            usage.rss_start_kib as f64 / 1024.0,
            usage.rss_end_kib as f64 / 1024.0,
            usage.cpu_us as f64 / 1000.0
        );
    }
    let mut results = measured.json(u64::from(n));
    results["connections"] = json!(n);
    results["connect_s"] = json!(round3(connect_s));
    results["rss_kib_per_connection"] = json!(per_conn_kib.map(round3));
    let params = json!({ "connections": n, "hold_s": args.hold_s });
    report::print("idle-connections", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

/// Waits (bounded) until the broker's RSS is steady.
fn settle(probe: &Probe) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = probe.sample()?.rss_kib;
    while started.elapsed() < SETTLE_LIMIT {
        std::thread::sleep(SETTLE_STEP);
        let now = probe.sample()?.rss_kib;
        if now.abs_diff(last) < SETTLED_RSS_DELTA_KIB {
            return Ok(());
        }
        last = now;
    }
    eprintln!("broker RSS still moving after {SETTLE_LIMIT:?}; taking the baseline anyway");
    Ok(())
}
