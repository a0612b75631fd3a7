//! Hourglass server: the only crate with sockets, tasks and the OS clock. It wires accepted TCP
//! connections to `hourglass_session` state machines and all of them to one broker task.

pub mod alarm;
pub mod broker_task;
pub mod clock;
pub mod config;
pub mod connection;
pub mod persistence;
pub mod users_file;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hourglass_broker::{Broker, BrokerConfig, ConnectionId};
use hourglass_mgmt::resources::ResourceStatus;
use hourglass_mgmt::{AppState, BrokerHandle, NodeInfo, UserStore};
use hourglass_session::SessionConfig;
use hourglass_store::OnCorruption;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use config::{Cli, Config};

/// How long connections get to finish the connection.close handshake at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Management jobs waiting for the broker task: few are in flight at once (one per HTTP request).
const JOB_QUEUE_CAPACITY: usize = 64;

/// Bound listeners and a recovered broker, ready to serve.
pub struct Server {
    config: Config,
    amqp: TcpListener,
    http: TcpListener,
    metrics: TcpListener,
    clock: clock::Clock,
    broker: Broker,
    data: persistence::DataDir,
    users: Arc<UserStore>,
}

impl Server {
    /// Opens and recovers the data directory (locking it), then binds the listeners named by
    /// `config`: nothing is accepted before the broker holds everything the store kept.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let clock = clock::Clock::new();
        let seed = name_seed(clock);
        let mut broker = Broker::new(BrokerConfig {
            name_seed: seed,
            persistence: true,
            apsaramq_delay_header: config.apsaramq_delay_header,
            ..BrokerConfig::default()
        });
        broker.set_paging_limits(config.paging);
        let data_dir = config.data_dir.clone();
        let loopback_users = config.loopback_users.clone();
        let on_corruption =
            if config.recover_skip_corrupt { OnCorruption::Skip } else { OnCorruption::Refuse };
        let (data, broker, users) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let mut data = persistence::DataDir::open(&data_dir, on_corruption)?;
            persistence::recover(&mut data, &mut broker, clock.now())?;
            let users = users_file::open(data.definitions.clone(), loopback_users, &mut broker, clock.now())?;
            Ok((data, broker, Arc::new(users)))
        })
        .await
        .context("recovery task")??;
        let addr = SocketAddr::new(config.bind, config.amqp_port);
        let amqp =
            TcpListener::bind(addr).await.with_context(|| format!("binding AMQP listener on {addr}"))?;
        let addr = SocketAddr::new(config.bind, config.http_port);
        let http =
            TcpListener::bind(addr).await.with_context(|| format!("binding HTTP API listener on {addr}"))?;
        let addr = SocketAddr::new(config.bind, config.metrics_port);
        let metrics =
            TcpListener::bind(addr).await.with_context(|| format!("binding metrics listener on {addr}"))?;
        Ok(Server { config, amqp, http, metrics, clock, broker, data, users })
    }

    /// The management HTTP API's address.
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    /// The Prometheus listener's address.
    pub fn metrics_addr(&self) -> std::io::Result<SocketAddr> {
        self.metrics.local_addr()
    }

    /// The AMQP listener's address (useful when bound to port 0).
    pub fn amqp_addr(&self) -> std::io::Result<SocketAddr> {
        self.amqp.local_addr()
    }

    /// Serves until `shutdown` completes, then closes every connection with 320
    /// CONNECTION_FORCED and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let (amqp_addr, http_addr, metrics_addr) =
            (self.amqp_addr()?, self.http_addr()?, self.metrics_addr()?);
        let Server { config, amqp, http, metrics, clock, broker, data, users } = self;
        let store_damage = data.damage();
        let (broker_tx, broker_rx) = mpsc::channel(broker_task::INPUT_QUEUE_CAPACITY);
        let (store_tx, store_rx) = std::sync::mpsc::channel();
        // Weak: the store thread must not keep the broker task alive at shutdown.
        let store_thread = persistence::spawn_store_thread(data, store_rx, broker_tx.downgrade())
            .context("starting the store thread")?;
        let broker_handle = tokio::spawn(broker_task::run(broker, broker_rx, clock, Some(store_tx)));
        let session_config = Arc::new(SessionConfig::new(users.clone()));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (alarm_tx, alarm_rx) = watch::channel(ResourceStatus::default());
        let limits = alarm::Limits {
            memory_fraction: config.vm_memory_high_watermark,
            disk_free_limit: config.disk_free_limit.bytes(alarm::total_memory_bytes()),
        };
        let alarm_task = tokio::spawn(alarm::monitor(limits, config.data_dir.clone(), alarm_tx));
        let mgmt = AppState {
            broker: BrokerHandle::new(forward_jobs(broker_tx.clone())),
            users,
            node: Arc::new(
                NodeInfo::new(config.bind, amqp_addr.port(), http_addr.port(), metrics_addr.port())
                    .with_resources(alarm_rx.clone())
                    .with_store_damage(store_damage),
            ),
            rates: Default::default(),
        };
        if let Some(path) = &config.load_definitions {
            // Before the AMQP listener accepts anyone, as RabbitMQ imports at boot.
            hourglass_mgmt::load_definitions_file(&mgmt, path).await.map_err(anyhow::Error::msg)?;
            tracing::info!(file = %path.display(), "definitions imported");
        }
        let mut http_tasks = JoinSet::new();
        for (listener, router) in [
            (http, hourglass_mgmt::api_router(mgmt.clone())),
            (metrics, hourglass_mgmt::metrics_router(mgmt)),
        ] {
            let mut stop = shutdown_rx.clone();
            let stopped = async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            http_tasks.spawn(hourglass_mgmt::serve(listener, router, stopped));
        }
        let next_id = AtomicU64::new(1);
        let mut connections = JoinSet::new();
        tracing::info!(
            amqp = %amqp_addr,
            http = %http_addr,
            metrics = %metrics_addr,
            data_dir = %config.data_dir.display(),
            "hourglass listening (AMQP 0-9-1, management API, Prometheus metrics)"
        );
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = amqp.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(pair) => pair,
                        Err(error) => {
                            // Out of file descriptors and the like: back off instead of spinning.
                            tracing::warn!(%error, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let cx = connection::ConnectionContext {
                        id: ConnectionId(next_id.fetch_add(1, Ordering::Relaxed)),
                        peer,
                        broker: broker_tx.clone(),
                        session_config: session_config.clone(),
                        clock,
                        shutdown: shutdown_rx.clone(),
                        resources: alarm_rx.clone(),
                    };
                    connections.spawn(connection::run(stream, cx));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        tracing::info!(connections = connections.len(), "shutting down");
        alarm_task.abort();
        drop(amqp);
        let _ = shutdown_tx.send(true);
        let drained =
            tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} })
                .await;
        if drained.is_err() {
            connections.abort_all();
        }
        let _ =
            tokio::time::timeout(SHUTDOWN_GRACE, async { while http_tasks.join_next().await.is_some() {} })
                .await;
        http_tasks.abort_all();
        // The broker task ends when the last sender goes (the management job forwarder's too,
        // now that the HTTP tasks are gone); then it drops the op sender, and the store thread
        // commits what it has and ends.
        drop(broker_tx);
        let _ = broker_handle.await;
        let _ = tokio::task::spawn_blocking(move || store_thread.join()).await;
        Ok(())
    }
}

/// A job queue for the management API whose jobs are forwarded, in order, into the broker's input
/// queue; the forwarder ends when the broker's queue closes or every job sender is gone.
fn forward_jobs(
    broker: mpsc::Sender<broker_task::BrokerInput>,
) -> mpsc::Sender<hourglass_broker::admin::Job> {
    let (tx, mut rx) = mpsc::channel(JOB_QUEUE_CAPACITY);
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            if broker.send(broker_task::BrokerInput::Job(job)).await.is_err() {
                break;
            }
        }
    });
    tx
}

/// Seed for server-generated names (queue names, consumer tags, direct reply-to addresses):
/// OS entropy, so reply addresses cannot be guessed; the clock and pid only where it is missing.
fn name_seed(clock: clock::Clock) -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => clock.now().as_millis() ^ u64::from(std::process::id()).rotate_left(32),
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Installs the `tracing` subscriber: `RUST_LOG` filters, `info` by default.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).try_init();
}
