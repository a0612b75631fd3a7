//! Hourglass server: the only crate with sockets, tasks and the OS clock. It wires accepted TCP
//! connections to `hourglass_session` state machines and all of them to one broker task.

pub mod alarm;
pub mod broker_task;
pub mod clock;
pub mod config;
pub mod connection;
pub mod failure_log;
pub mod fd_limit;
pub mod health_check;
pub mod listen;
pub mod logging;
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
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

pub use config::{Cli, Config};
pub use logging::init_logging;

/// How long connections get to finish the connection.close handshake at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Management jobs waiting for the broker task: few are in flight at once (one per HTTP request).
const JOB_QUEUE_CAPACITY: usize = 64;

/// Refused connections are logged at most this often, so a flood does not flood the log too.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Bound listeners and a recovered broker, ready to serve.
pub struct Server {
    config: Config,
    /// AMQP connections at once: the configured limit, fitted under the fd limit.
    max_connections: usize,
    amqp: TcpListener,
    http: TcpListener,
    metrics: TcpListener,
    clock: clock::Clock,
    broker: Broker,
    data: persistence::DataDir,
    users: Arc<UserStore>,
}

impl Server {
    /// Binds the listeners named by `config` (a port in use fails here, before the data directory
    /// is touched), then opens and recovers the data directory (locking it): nothing is accepted
    /// before the broker holds everything the store kept. Errors are one line each.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let ip = listen::resolve_bind(config.bind);
        let amqp = listen::bind(ip, config.amqp_port, "AMQP")?;
        let http = listen::bind(ip, config.http_port, "HTTP API")?;
        let metrics = listen::bind(ip, config.metrics_port, "metrics")?;
        let clock = clock::Clock::new();
        let fds = fd_limit::raise_to_hard_limit();
        let max_connections =
            fd_limit::amqp_connection_limit(config.max_connections, fds, config.http.max_connections);
        // Fitting the default under the fd limit is routine (the start-up "limits" line shows the
        // result); only a limit the operator set that cannot be honoured is worth a warning.
        if max_connections < config.max_connections
            && config.max_connections != config::DEFAULT_MAX_CONNECTIONS
        {
            tracing::warn!(
                configured = config.max_connections,
                max_connections,
                fd_limit = ?fds,
                "AMQP connection limit lowered to fit the open-files limit"
            );
        }
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
        let damaged = if config.set_aside_damaged_definitions {
            persistence::DamagedDefinitions::SetAside
        } else {
            persistence::DamagedDefinitions::Refuse
        };
        let on_corruption =
            if config.recover_skip_corrupt { OnCorruption::Skip } else { OnCorruption::Refuse };
        let (data, broker, users) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let mut data = persistence::DataDir::open(&data_dir, on_corruption)?;
            let report = persistence::recover(&mut data, &mut broker, damaged, clock.now())?;
            // A vhost holding queues recreated for orphaned messages stays, whatever users.snap says.
            let keep: Vec<String> = report.orphaned.iter().map(|o| o.vhost.clone()).collect();
            let users =
                users_file::open(data.definitions.clone(), loopback_users, &keep, &mut broker, clock.now())?;
            Ok((data, broker, Arc::new(users)))
        })
        .await
        .context("recovery task")??;
        Ok(Server { config, max_connections, amqp, http, metrics, clock, broker, data, users })
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
        let Server { config, max_connections, amqp, http, metrics, clock, broker, data, users } = self;
        let store_damage = data.damage();
        let (broker_tx, broker_rx) = mpsc::channel(broker_task::INPUT_QUEUE_CAPACITY);
        let (store_tx, store_rx) = std::sync::mpsc::channel();
        // Weak: the store thread must not keep the broker task alive at shutdown.
        let store_thread = persistence::spawn_store_thread(data, store_rx, broker_tx.downgrade())
            .context("starting the store thread")?;
        let broker_handle = tokio::spawn(broker_task::run(broker, broker_rx, clock, Some(store_tx)));
        // One failed-login slowdown for AMQP and HTTP: a guesser gains nothing by switching.
        let logins = Arc::new(hourglass_session::LoginLimiter::new(config.login_failure_delay_ms));
        let session_config = Arc::new(SessionConfig {
            login_limiter: logins.clone(),
            max_message_size: config.amqp.max_message_size,
            channel_max: config.amqp.channel_max,
            frame_max: config.amqp.frame_max,
            ..SessionConfig::new(users.clone())
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (alarm_tx, alarm_rx) = watch::channel(ResourceStatus::default());
        let limits = alarm::Limits {
            memory_fraction: config.vm_memory_high_watermark,
            disk_free_limit: config.disk_free_limit.bytes(alarm::total_memory_bytes()),
        };
        let inbound = Arc::new(alarm::InboundContent::default());
        let alarm_task =
            tokio::spawn(alarm::monitor(limits.clone(), config.data_dir.clone(), inbound.clone(), alarm_tx));
        let mgmt = AppState {
            broker: BrokerHandle::new(forward_jobs(broker_tx.clone())),
            users,
            node: Arc::new(
                NodeInfo::new(amqp_addr.ip(), amqp_addr.port(), http_addr.port(), metrics_addr.port())
                    .with_resources(alarm_rx.clone())
                    .with_store_damage(store_damage),
            ),
            rates: Default::default(),
            logins,
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
            http_tasks.spawn(hourglass_mgmt::serve(listener, router, config.http, stopped));
        }
        let next_id = AtomicU64::new(1);
        let slots = Arc::new(Semaphore::new(max_connections));
        let mut refusals = RefusalLog::default();
        let mut connections = JoinSet::new();
        log_start(&config, &limits, max_connections, amqp_addr, http_addr, metrics_addr);
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
                    // On the dual-stack socket an IPv4 client is `::ffff:a.b.c.d`: name it as
                    // IPv4 in logs, connection names and per-address login limits.
                    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Closed at once: the socket costs nothing more than the accept.
                        refusals.record(peer, max_connections);
                        continue;
                    };
                    let cx = connection::ConnectionContext {
                        id: ConnectionId(next_id.fetch_add(1, Ordering::Relaxed)),
                        peer,
                        broker: broker_tx.clone(),
                        session_config: session_config.clone(),
                        clock,
                        shutdown: shutdown_rx.clone(),
                        resources: alarm_rx.clone(),
                        inbound: inbound.clone(),
                        send_timeout: std::time::Duration::from_millis(config.tcp_send_timeout_ms),
                    };
                    connections.spawn(async move {
                        connection::run(stream, cx).await;
                        drop(slot);
                    });
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

/// Counts AMQP sockets refused at the connection limit; logs them at most once per
/// [`REFUSAL_LOG_INTERVAL`], with the count since the last line.
#[derive(Default)]
struct RefusalLog {
    unlogged: u64,
    last: Option<std::time::Instant>,
}

impl RefusalLog {
    fn record(&mut self, peer: SocketAddr, limit: usize) {
        self.unlogged += 1;
        let now = std::time::Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        tracing::warn!(%peer, refused = self.unlogged, limit, "AMQP connection limit reached: closing new sockets");
        self.unlogged = 0;
        self.last = Some(now);
    }
}

/// The start-up lines, one per subject: listeners (tests and scripts parse `amqp=`), data
/// directory, limits.
fn log_start(
    config: &Config,
    limits: &alarm::Limits,
    max_connections: usize,
    amqp: SocketAddr,
    http: SocketAddr,
    metrics: SocketAddr,
) {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %amqp,
        %http,
        %metrics,
        "hourglass listening: AMQP 0-9-1, management API, Prometheus metrics"
    );
    tracing::info!(data_dir = %config.data_dir.display(), "durable data in");
    let loopback_users =
        if config.loopback_users.is_empty() { "none".to_owned() } else { config.loopback_users.join(",") };
    tracing::info!(
        vm_memory_high_watermark = limits.memory_fraction,
        disk_free_limit_bytes = limits.disk_free_limit,
        queue_resident_messages = config.paging.max_resident_messages,
        queue_resident_bytes = config.paging.max_resident_bytes,
        login_failure_delay_ms = config.login_failure_delay_ms,
        max_connections,
        max_message_size = config.amqp.max_message_size,
        channel_max = config.amqp.channel_max,
        frame_max = config.amqp.frame_max,
        %loopback_users,
        "limits"
    );
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
