//! Append + commit throughput on real files with fsync, for several batch sizes (group commit).
//!
//! `cargo run --release -p hourglass-store --example commit_bench -- [DIR]`
//! DIR defaults to `./target/commit-bench`; use a directory on the disk you care about (a tmpfs
//! /tmp makes fsync free and the numbers meaningless).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hourglass_store::{FsStorage, Store, StoreConfig};

/// Body size of each message: a small persistent message.
const BODY_BYTES: usize = 1024;
/// How long each batch size runs.
const RUN_TIME: Duration = Duration::from_secs(3);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "target/commit-bench".to_owned());
    let body = vec![0x5a; BODY_BYTES];
    println!("dir {dir}, body {BODY_BYTES} B, {RUN_TIME:?} per batch size");
    for batch in [1u64, 10, 100, 1000] {
        let _ = std::fs::remove_dir_all(&dir);
        let storage = Arc::new(FsStorage::open(&dir)?);
        let (mut store, _) = Store::open(storage, StoreConfig::default())?;
        let (mut commits, mut messages, mut msg_id) = (0u64, 0u64, 0u64);
        let start = Instant::now();
        while start.elapsed() < RUN_TIME {
            for _ in 0..batch {
                msg_id += 1;
                store.append_enqueue(1, msg_id, &[0; 16], &body)?;
            }
            store.commit()?;
            commits += 1;
            messages += batch;
            // Settle what was committed so compaction keeps the disk use flat, as in steady state.
            for id in msg_id + 1 - batch..=msg_id {
                store.append_settle(1, id)?;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "batch {batch:>5}: {:>9.0} commits/s (fsyncs), {:>10.0} msgs/s, {:>7.1} MiB/s, mean commit {:>7.1} us",
            commits as f64 / secs,
            messages as f64 / secs,
            (messages as f64 * BODY_BYTES as f64) / secs / (1024.0 * 1024.0),
            secs * 1e6 / commits as f64,
        );
        store.compact()?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    append_cost(&body)
}

/// CPU cost of one append (encode + checksum + index), no I/O: 1,000,000 appends into the write
/// buffer, timed apart from the commits (the in-memory backend's own copying is not the store's).
fn append_cost(body: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    const APPENDS: u64 = 1_000_000;
    let storage = Arc::new(hourglass_store::MemStorage::new());
    let (mut store, _) = Store::open(storage, StoreConfig::default())?;
    let mut appending = Duration::ZERO;
    for batch in 0..APPENDS / 1000 {
        let start = Instant::now();
        for id in batch * 1000..(batch + 1) * 1000 {
            store.append_enqueue(id % 64, id, &[0; 16], body)?;
        }
        appending += start.elapsed();
        store.commit()?;
    }
    let per = appending.as_secs_f64() * 1e9 / APPENDS as f64;
    println!("append alone: {per:.0} ns per {}-byte message", body.len());
    Ok(())
}
