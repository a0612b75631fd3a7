//! The `hourglass` broker binary: parse settings, serve until SIGINT/SIGTERM.
//!
//! A start-up error (port in use, data dir locked or unwritable, a bad setting) is one line on
//! stderr, `hourglass: <what>: <why>`, and exit status 1 — never a backtrace, whatever
//! `RUST_BACKTRACE` says: the error is printed here, not returned from `main`.
//!
//! The allocator is chosen here, for the binary alone: jemalloc on Linux, with its background
//! threads on, so memory freed after a load goes back to the OS within seconds even while the
//! broker is idle (the memory alarm reads RSS). Why, and what it costs: docs/adr/0010-allocator.md.

use std::process::ExitCode;

use clap::Parser;
use hourglass_server::{Cli, Config, Server};

/// jemalloc, built with `background_thread:true` (the `background_threads` feature) and
/// `dirty_decay_ms:1000` (`.cargo/config.toml`): a few background threads, asleep until there is
/// freed memory to purge, return pages freed more than about a second ago without waiting for
/// the next allocation. `_RJEM_MALLOC_CONF` overrides the settings at start.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long blocking tasks may still run once the server is done, before the process exits.
const EXIT_LINGER: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let health_check = cli.health_check;
    let result = Config::resolve(cli).and_then(|config| {
        if health_check {
            return hourglass_server::health_check::check(&config).map_err(anyhow::Error::from);
        }
        hourglass_server::init_logging(config.log_format);
        let mut runtime = tokio::runtime::Builder::new_multi_thread();
        if let Some(threads) = config.worker_threads {
            runtime.worker_threads(threads.get());
        }
        let runtime = runtime.enable_all().build()?;
        let served = runtime.block_on(async {
            // Before anything is bound: a SIGTERM at any point after start-up closes cleanly.
            let shutdown = hourglass_server::shutdown_signal();
            if let Some(cluster) = config.cluster.clone() {
                return hourglass_server::cluster_mode::run(config, cluster, shutdown).await;
            }
            let server = Server::bind(config).await?;
            server.run(shutdown).await
        });
        // Blocking work still running (an etcd request to an etcd that does not answer) is not
        // waited for: an exit must not hang on it (issue #21, SIGTERM within 10 s).
        runtime.shutdown_timeout(EXIT_LINGER);
        served
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}`: the error and its causes on one line, no backtrace.
            eprintln!("hourglass: {error:#}");
            ExitCode::FAILURE
        }
    }
}
