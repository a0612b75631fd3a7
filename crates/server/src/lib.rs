//! Hourglass server: the only crate with sockets, tasks and the OS clock. It wires accepted TCP
//! connections to `hourglass_session` state machines and all of them to one broker task.

pub mod admission;
pub mod alarm;
pub mod blocking_reads;
pub mod broker_task;
pub mod catalog_file;
pub mod clock;
pub mod cluster_mode;
pub mod config;
pub mod connection;
pub mod failure_log;
pub mod fd_limit;
pub mod health_check;
pub mod identity;
pub mod listen;
pub mod logging;
pub mod persistence;
pub mod spill_files;
pub mod supervise;
pub mod tls;
pub mod web;

use std::future::Future;
use std::net::SocketAddr;
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
pub use logging::init_logging;

/// How long connections get to finish the connection.close handshake at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Management jobs waiting for the broker task: few are in flight at once (one per HTTP request).
const JOB_QUEUE_CAPACITY: usize = 64;

/// The three TLS listeners and the settings their handshakes use (reloaded on SIGHUP).
struct TlsListeners {
    amqps: TcpListener,
    https: TcpListener,
    metrics: TcpListener,
    /// The SQS endpoint over TLS, when it is served.
    sqs: Option<TcpListener>,
    live: tls::LiveTls,
}

/// Bound listeners and a recovered broker, ready to serve.
pub struct Server {
    config: Config,
    /// AMQP connections at once (plain and TLS together): the configured limit, fitted under the
    /// fd limit.
    max_connections: usize,
    /// Descriptors AMQP connections may hold in all (`None`: no fd limit); AMQPS ones hold three.
    fd_room: Option<usize>,
    /// Plain listeners; `None` where switched off.
    amqp: Option<TcpListener>,
    http: Option<TcpListener>,
    metrics: Option<TcpListener>,
    /// The SQS endpoint's listener, when `--sqs-port` is set.
    sqs: Option<TcpListener>,
    /// What access keys' secrets are sealed with, when `secrets_key_file` is set.
    secrets: Option<Arc<hourglass_mgmt::users::SecretsKey>>,
    /// TLS listeners and their live settings, when TLS is configured.
    tls: Option<TlsListeners>,
    clock: clock::Clock,
    broker: Broker,
    data: persistence::DataDir,
    users: UserStore,
    /// The administrator this start made (a first start's guest), named in the start-up banner.
    made_user: Option<identity::MadeUser>,
    hooks: ServerHooks,
}

/// What clustered mode adds to a broker (cluster_mode.rs): its storage replicated, its status in
/// the API. The default is a single node.
#[derive(Clone, Default)]
pub struct ServerHooks {
    pub storage: Option<persistence::StorageWrapper>,
    pub cluster: Option<Arc<dyn hourglass_mgmt::ClusterStatus>>,
    /// The cluster member's name (the node is then `hourglass@NAME`).
    pub node_name: Option<String>,
    /// The cluster's name (`--cluster-name`), for `/api/overview` and `rabbitmq_identity_info`.
    pub cluster_name: Option<String>,
    /// Test only: a part made to die (`supervise::INJECT_DEATH_VAR`); `None` in normal use.
    pub inject_death: Option<supervise::InjectedDeath>,
}

/// Raises the open-files limit to its hard limit and fits the connection limits under it: the
/// HTTP listeners' (lowered in `config`, with a warning) and the AMQP connections'. `sqs` and
/// `tls`: whether those listeners serve. Returns the AMQP connection limit and the descriptors
/// left for AMQP connections (`None`: no limit known).
fn fit_to_fd_limit(config: &mut Config, sqs: bool, tls: bool) -> anyhow::Result<(usize, Option<usize>)> {
    let fds = fd_limit::raise_to_hard_limit();
    let plain = config.plain;
    let http_listeners = [plain.http, plain.metrics, tls, tls, sqs].iter().filter(|on| **on).count();
    let budget = fd_limit::budget(fds, http_listeners, config.http.max_connections)?;
    if budget.http_connections < config.http.max_connections {
        tracing::warn!(
            configured = config.http.max_connections,
            http_max_connections = budget.http_connections,
            fd_limit = ?fds,
            "HTTP connection limit lowered to fit the open-files limit"
        );
        config.http.max_connections = budget.http_connections;
    }
    let fd_room = budget.amqp_room;
    let max_connections = fd_limit::amqp_connection_limit(config.max_connections, fd_room);
    // Fitting the default under the fd limit is routine (the start-up "limits" line shows the
    // result); only a limit the operator set that cannot be honoured is worth a warning.
    if max_connections < config.max_connections && config.max_connections != config::DEFAULT_MAX_CONNECTIONS {
        tracing::warn!(
            configured = config.max_connections,
            max_connections,
            fd_limit = ?fds,
            "AMQP connection limit lowered to fit the open-files limit"
        );
    }
    Ok((max_connections, fd_room))
}

impl Server {
    /// Binds the listeners named by `config` (a port in use fails here, before the data directory
    /// is touched), then opens and recovers the data directory (locking it): nothing is accepted
    /// before the broker holds everything the store kept. Errors are one line each.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let hooks = ServerHooks { inject_death: supervise::InjectedDeath::from_env(), ..Default::default() };
        Server::bind_with(config, hooks).await
    }

    /// [`Server::bind`] with clustered mode's additions.
    pub async fn bind_with(mut config: Config, hooks: ServerHooks) -> anyhow::Result<Server> {
        let ip = listen::resolve_bind(config.bind);
        let plain = config.plain;
        let amqp = plain.amqp.then(|| listen::bind(ip, config.amqp_port, "AMQP")).transpose()?;
        let http = plain.http.then(|| listen::bind(ip, config.http_port, "HTTP API")).transpose()?;
        let metrics = plain.metrics.then(|| listen::bind(ip, config.metrics_port, "metrics")).transpose()?;
        let sqs = config.sqs_port.map(|port| listen::bind(ip, port, "SQS")).transpose()?;
        let tls = match &config.tls {
            Some(settings) => Some(TlsListeners {
                // The certificate is read first: a bad one fails the start before anything binds.
                live: tls::LiveTls::load(settings)?,
                amqps: listen::bind(ip, settings.amqps_port, "AMQPS")?,
                https: listen::bind(ip, settings.https_port, "HTTPS API")?,
                metrics: listen::bind(ip, settings.metrics_port, "metrics over TLS")?,
                sqs: settings.sqs_port.map(|port| listen::bind(ip, port, "SQS over TLS")).transpose()?,
            }),
            None => None,
        };
        let secrets = match &config.secrets_key_file {
            Some(path) => Some(Arc::new(secrets_key(path, &config.data_dir)?)),
            None => None,
        };
        let clock = clock::Clock::new();
        let (max_connections, fd_room) = fit_to_fd_limit(&mut config, sqs.is_some(), tls.is_some())?;
        let seed = name_seed(clock);
        let mut broker = Broker::new(BrokerConfig {
            name_seed: seed,
            persistence: true,
            apsaramq_delay_header: config.apsaramq_delay_header,
            consumer_timeout: config.consumer_timeout,
            delivery_counting: config.delivery_counting,
            overdue_release_rate: config.overdue_release_rate,
            receipt_key: hourglass_broker::receipts::ReceiptKey::random(),
            ..BrokerConfig::default()
        });
        broker.set_paging_limits(config.paging);
        let data_dir = config.data_dir.clone();
        let loopback_users = config.loopback_users.clone();
        let default_user = config.default_user.clone();
        let damaged = if config.set_aside_damaged_definitions {
            persistence::DamagedDefinitions::SetAside
        } else {
            persistence::DamagedDefinitions::Refuse
        };
        let on_corruption =
            if config.recover_skip_corrupt { OnCorruption::Skip } else { OnCorruption::Refuse };
        let wrap = hooks.storage.clone();
        let (data, broker, users, made_user) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let opened_at = clock.now();
            let mut data =
                persistence::DataDir::open(&data_dir, on_corruption, damaged, wrap.as_ref(), opened_at)?;
            let report = persistence::recover(&mut data, &mut broker, clock.now())
                .context("reading the recovered messages back from the message log")?;
            // A vhost holding queues recreated for orphaned messages stays, whatever users.snap says.
            let keep: Vec<String> = report.orphaned.iter().map(|o| o.vhost.clone()).collect();
            let (users, made_user) = identity::open(
                data.catalog.clone(),
                identity::Blank { history: data.catalog_history, default_user: default_user.as_ref() },
                data.definitions.as_ref(),
                loopback_users,
                &keep,
                &mut broker,
                clock.now(),
            )?;
            Ok((data, broker, users, made_user))
        })
        .await
        .context("recovery task")??;
        Ok(Server {
            config,
            max_connections,
            fd_room,
            amqp,
            http,
            metrics,
            sqs,
            secrets,
            tls,
            clock,
            broker,
            data,
            users,
            made_user,
            hooks,
        })
    }

    /// The SQS endpoint's address.
    pub fn sqs_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.sqs.as_ref())
    }

    /// The management HTTP API's address.
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.http.as_ref())
    }

    /// The Prometheus listener's address.
    pub fn metrics_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.metrics.as_ref())
    }

    /// The AMQP listener's address (useful when bound to port 0).
    pub fn amqp_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.amqp.as_ref())
    }

    /// The AMQPS listener's address.
    pub fn amqps_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.tls.as_ref().map(|tls| &tls.amqps))
    }

    /// The HTTPS API listener's address.
    pub fn https_addr(&self) -> std::io::Result<SocketAddr> {
        local_addr(self.tls.as_ref().map(|tls| &tls.https))
    }

    /// Serves until `shutdown` completes, then closes every connection with 320
    /// CONNECTION_FORCED and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let addrs = ListenAddrs::of(&self);
        let Server {
            config,
            max_connections,
            fd_room,
            amqp,
            http,
            metrics,
            sqs,
            secrets,
            tls,
            clock,
            broker,
            data,
            users,
            made_user,
            hooks,
        } = self;
        let store_damage = data.damage();
        let stored_messages = data.stored_messages.clone();
        let Core { broker_tx, command_budget, mut broker_handle, mut store_ended } =
            start_core(broker, data, clock, hooks.inject_death)?;
        // From now on the user store's changes go through the broker task and the store thread,
        // like every definition (start-up wrote through the catalog directly: nothing ran yet).
        let broker_jobs = BrokerHandle::new(forward_jobs(broker_tx.clone()));
        let users = Arc::new(users.persist_with(hourglass_mgmt::saver_through_store(&broker_jobs)));
        // One failed-login slowdown for AMQP and HTTP: a guesser gains nothing by switching.
        let logins = Arc::new(hourglass_session::LoginLimiter::new(config.login_failure_delay_ms));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let Alarms { limits, limits_tx, status: alarm_rx, inbound, task: alarm_task } =
            start_alarms(&config, stored_messages);
        let node = node_info(&addrs, hooks, alarm_rx.clone(), limits_tx, store_damage);
        let session_config = session_config(&config, users.clone(), logins.clone(), &node.name);
        let mgmt = AppState {
            broker: broker_jobs,
            users,
            node: Arc::new(node),
            rates: Default::default(),
            logins,
            listings: Default::default(),
            secrets: secrets.clone(),
        };
        // Rates from the first look: every object sampled every 5 s (mgmt/src/rates/sampler.rs),
        // until shutdown.
        tokio::spawn(hourglass_mgmt::rates::sampler::run(mgmt.clone(), web::stopped(&shutdown_rx)));
        // Before the AMQP listener accepts anyone, as RabbitMQ imports at boot.
        import_definitions(&mgmt, config.load_definitions.as_deref()).await?;
        let (amqps, amqp_tls, listeners) = split_listeners(http, metrics, sqs, tls, &config);
        let mut http_tasks = web::serve(listeners, mgmt, &config, &shutdown_rx).await;
        let template = connection::ConnectionContext {
            id: ConnectionId(0),
            peer: SocketAddr::from(([0, 0, 0, 0], 0)),
            local: SocketAddr::from(([0, 0, 0, 0], 0)),
            broker: broker_tx.clone(),
            commands: command_budget.clone(),
            session_config,
            clock,
            shutdown: shutdown_rx.clone(),
            resources: alarm_rx.clone(),
            inbound,
            send_timeout: std::time::Duration::from_millis(config.tcp_send_timeout_ms),
        };
        let mut admission = admission::Admission::new(max_connections, fd_room, template, amqp_tls);
        let mut connections = JoinSet::new();
        log_start(&config, &limits, max_connections, &addrs);
        log_ui(&addrs, made_user.as_ref(), &config.loopback_users);
        tokio::pin!(shutdown);
        let mut died: Option<supervise::Died> = None;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                ended = &mut broker_handle => {
                    died = Some(supervise::Died::new(supervise::Part::BrokerTask, broker_end(ended)));
                    break;
                }
                ended = &mut store_ended => {
                    died = Some(store_death(ended, &mut broker_handle).await);
                    break;
                }
                (accepted, over_tls) = accept_either(amqp.as_ref(), amqps.as_ref()) => match accepted {
                    Ok((stream, peer)) => admission.admit(stream, peer, over_tls, &mut connections),
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        alarm_task.abort();
        if let Some(died) = died {
            // Nothing can be served or made durable any more: no graceful close that would wait
            // on the dead part; the caller exits non-zero (releasing a cluster lease first).
            connections.abort_all();
            http_tasks.abort_all();
            return Err(died.into());
        }
        tracing::info!(connections = connections.len(), "shutting down");
        // The listeners, and the admission: its connection template holds a broker sender.
        drop((amqp, amqps, admission));
        let _ = shutdown_tx.send(true);
        drain(connections, http_tasks).await;
        // The broker task ends when the last sender goes (the management job forwarder's too,
        // now that the HTTP tasks are gone); then it drops the op sender, and the store thread
        // commits what it has and ends.
        drop(broker_tx);
        let _ = broker_handle.await;
        let _ = store_ended.await;
        Ok(())
    }
}

/// The broker task and the store thread, running: the broker task's input and the room its
/// commands take, and each one's end as the server supervises it.
struct Core {
    broker_tx: mpsc::Sender<broker_task::BrokerInput>,
    command_budget: broker_task::CommandBudget,
    broker_handle: tokio::task::JoinHandle<()>,
    /// The store thread's end (or panic), seen from the server's loop.
    store_ended: tokio::task::JoinHandle<std::thread::Result<()>>,
}

/// Starts the store thread on `data` and the broker task on `broker`; `inject`: test only, a
/// part made to die (`supervise::InjectedDeath`).
fn start_core(
    broker: Broker,
    data: persistence::DataDir,
    clock: clock::Clock,
    inject: Option<supervise::InjectedDeath>,
) -> anyhow::Result<Core> {
    let (broker_tx, command_budget, broker_rx) = broker_task::input_queue();
    let (store_tx, store_rx) = std::sync::mpsc::channel();
    // Weak: the store thread must not keep the broker task alive at shutdown.
    let store_thread = persistence::spawn_store_thread(
        data,
        store_rx,
        broker_tx.downgrade(),
        supervise::InjectedDeath::of(inject, supervise::Part::StoreThread),
    )
    .context("starting the store thread")?;
    let store_ended = tokio::task::spawn_blocking(move || store_thread.join());
    let broker_handle = spawn_broker_task(
        broker_task::run(broker, broker_rx, command_budget.clone(), clock, Some(store_tx)),
        supervise::InjectedDeath::of(inject, supervise::Part::BrokerTask),
    );
    Ok(Core { broker_tx, command_budget, broker_handle, store_ended })
}

/// Imports the definitions file at `path`, if one is set (`load_definitions`).
async fn import_definitions(mgmt: &AppState, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    hourglass_mgmt::load_definitions_file(mgmt, path).await.map_err(anyhow::Error::msg)?;
    tracing::info!(file = %path.display(), "definitions imported");
    Ok(())
}

/// The AMQP sessions' settings: logins slowed down by `logins` (shared with the HTTP API),
/// users checked by `users`, the limits and the product name `config` sets, the node's name.
fn session_config(
    config: &Config,
    users: Arc<dyn hourglass_session::Authenticator>,
    logins: Arc<hourglass_session::LoginLimiter>,
    node_name: &str,
) -> Arc<SessionConfig> {
    Arc::new(SessionConfig {
        node_name: node_name.to_owned(),
        login_limiter: logins,
        external_auth: config.tls.as_ref().is_some_and(|tls| tls.external_auth),
        anonymous_login: config.anonymous_login.clone(),
        max_message_size: config.amqp.max_message_size,
        channel_max: config.amqp.channel_max,
        frame_max: config.amqp.frame_max,
        product: config.server_product.clone(),
        ..SessionConfig::new(users)
    })
}

/// The memory and disk alarms, watched: the limits as configured, their sender (the HTTP API
/// changes them until the next restart), the alarms' state, the body bytes connections hold
/// (their growth makes the monitor look at once), and the monitor's task.
struct Alarms {
    limits: alarm::Limits,
    limits_tx: watch::Sender<hourglass_mgmt::resources::AlarmLimits>,
    status: watch::Receiver<ResourceStatus>,
    inbound: Arc<alarm::InboundContent>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts the alarm monitor on `config`'s limits; `stored_messages` counts what the store holds.
fn start_alarms(config: &Config, stored_messages: Arc<std::sync::atomic::AtomicU64>) -> Alarms {
    let (alarm_tx, status) = watch::channel(ResourceStatus::default());
    let limits = alarm::Limits {
        memory_fraction: config.vm_memory_high_watermark,
        disk_free_limit: config.disk_free_limit.bytes(hourglass_mgmt::resources::total_memory_bytes()),
    };
    let (limits_tx, limits_rx) = watch::channel(limits.in_bytes());
    let inbound = Arc::new(alarm::InboundContent::default());
    let monitor =
        alarm::monitor(limits_rx, config.data_dir.clone(), inbound.clone(), stored_messages, alarm_tx);
    Alarms { limits, limits_tx, status, inbound, task: tokio::spawn(monitor) }
}

/// The node as the HTTP API shows it: its listeners, alarms and their limits, the store's
/// damage, and in clustered mode the cluster and the names `hooks` give.
fn node_info(
    addrs: &ListenAddrs,
    hooks: ServerHooks,
    alarms: watch::Receiver<ResourceStatus>,
    limits: watch::Sender<hourglass_mgmt::resources::AlarmLimits>,
    damage: hourglass_mgmt::StoreDamage,
) -> NodeInfo {
    let mut node = NodeInfo::new(addrs.ip(), port(addrs.amqp), port(addrs.http), port(addrs.metrics))
        .with_listeners(addrs.listeners())
        .with_resources(alarms)
        .with_alarm_limits(Arc::new(limits))
        .with_store_damage(damage);
    if let Some(cluster) = hooks.cluster {
        node = node.with_cluster(cluster);
    }
    if let Some(name) = &hooks.node_name {
        node = node.with_node_name(name);
    }
    if let Some(name) = &hooks.cluster_name {
        node = node.with_cluster_name(name);
    }
    node
}

/// What ended the store thread while the server ran: its panic, or, since it ends by itself
/// only when the broker task is gone, the broker task's end (its panic may be reported just
/// after the thread's end).
async fn store_death<T>(
    ended: Result<std::thread::Result<T>, tokio::task::JoinError>,
    broker_handle: &mut tokio::task::JoinHandle<()>,
) -> supervise::Died {
    match ended {
        Ok(Err(payload)) => {
            supervise::Died::new(supervise::Part::StoreThread, supervise::panic_message(payload.as_ref()))
        }
        _ => match tokio::time::timeout(Duration::from_secs(1), broker_handle).await {
            Ok(ended) => supervise::Died::new(supervise::Part::BrokerTask, broker_end(ended)),
            Err(_) => supervise::Died::new(supervise::Part::StoreThread, "it stopped"),
        },
    }
}

/// Waits up to [`SHUTDOWN_GRACE`] for the connections to close, then for the HTTP tasks to end,
/// and aborts what is left of each.
async fn drain(mut connections: JoinSet<()>, mut http_tasks: JoinSet<std::io::Result<()>>) {
    let closed = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, closed).await.is_err() {
        connections.abort_all();
    }
    let ended = async { while http_tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, ended).await;
    http_tasks.abort_all();
}

/// The AMQPS listener and its live TLS settings, and the HTTP services' listeners, plain and
/// over TLS. A certificate change on SIGHUP reaches every TLS listener.
fn split_listeners(
    http: Option<TcpListener>,
    metrics: Option<TcpListener>,
    sqs: Option<TcpListener>,
    tls: Option<TlsListeners>,
    config: &Config,
) -> (Option<TcpListener>, Option<hourglass_mgmt::tls::LiveTlsConfig>, web::Listeners) {
    let Some(TlsListeners { amqps, https, metrics: metrics_tls, sqs: sqs_tls, live }) = tls else {
        return (None, None, web::Listeners { http, metrics, https: None, sqs, sqs_tls: None });
    };
    #[cfg(unix)]
    if let Some(settings) = config.tls.clone() {
        tls::reload_on_sighup(live.clone(), settings);
    }
    #[cfg(not(unix))]
    let _ = config;
    let sqs_tls = sqs_tls.map(|listener| (listener, live.http.clone()));
    let https = Some((https, metrics_tls, live.http));
    (Some(amqps), Some(live.amqp), web::Listeners { http, metrics, https, sqs, sqs_tls })
}

/// Why the broker task ended while the server ran.
fn broker_end(ended: Result<(), tokio::task::JoinError>) -> String {
    match ended {
        Err(error) if error.is_panic() => supervise::panic_message(error.into_panic().as_ref()),
        Err(error) => error.to_string(),
        Ok(()) => "it stopped: the store thread is gone".to_owned(),
    }
}

/// Spawns the broker task. Test only: with `die_after`, it panics that long after it starts
/// (`supervise::InjectedDeath`).
fn spawn_broker_task(
    task: impl Future<Output = ()> + Send + 'static,
    die_after: Option<Duration>,
) -> tokio::task::JoinHandle<()> {
    let Some(after) = die_after else { return tokio::spawn(task) };
    tokio::spawn(async move {
        tokio::select! {
            _ = task => {}
            _ = tokio::time::sleep(after) => supervise::die_injected(supervise::Part::BrokerTask),
        }
    })
}

/// The start-up lines, one per subject: listeners (tests and scripts parse `amqp=`, `amqps=`),
/// data directory, limits.
fn log_start(config: &Config, limits: &alarm::Limits, max_connections: usize, addrs: &ListenAddrs) {
    let show = |addr: Option<SocketAddr>| addr.map_or_else(|| "off".to_owned(), |a| a.to_string());
    // The runtime's threads (`worker_threads`, ADR 0014): how much of the machine it may use.
    let worker_threads = tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_workers());
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        amqp = %show(addrs.amqp),
        http = %show(addrs.http),
        metrics = %show(addrs.metrics),
        sqs = %show(addrs.sqs),
        worker_threads,
        "hourglass listening: AMQP 0-9-1, management API, Prometheus metrics, SQS"
    );
    if let Some(tls) = &config.tls {
        tracing::info!(
            amqps = %show(addrs.amqps),
            https = %show(addrs.https),
            metrics_tls = %show(addrs.metrics_tls),
            sqs_tls = %show(addrs.sqs_tls),
            verify_peer = tls.verify_peer,
            fail_if_no_peer_cert = tls.fail_if_no_peer_cert,
            external_auth = tls.external_auth,
            "TLS listeners (TLS 1.3, 1.2)"
        );
    }
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
        http_max_connections = config.http.max_connections,
        max_message_size = config.amqp.max_message_size,
        channel_max = config.amqp.channel_max,
        frame_max = config.amqp.frame_max,
        %loopback_users,
        "limits"
    );
}

/// The banner's pointer to the web UI: its URL (HTTPS when plain HTTP is off), and the login a
/// first start made. The password is printed only for guest, whose is the well-known default.
fn log_ui(addrs: &ListenAddrs, made: Option<&identity::MadeUser>, loopback_users: &[String]) {
    let Some(url) = ui_url(addrs) else { return };
    match made {
        Some(identity::MadeUser::Guest) => {
            let from = if loopback_users.iter().any(|u| u == "guest") { " from this machine" } else { "" };
            tracing::info!(
                "management UI at {url} : log in as guest / guest{from} (made at this first start; \
                 add your own administrator and delete guest: docs/configuration.md)"
            )
        }
        Some(identity::MadeUser::DefaultUser(name)) => tracing::info!(
            "management UI at {url} : log in as {name} with the --default-pass (made at this start)"
        ),
        None => tracing::info!("management UI at {url}"),
    }
}

/// `http://host:port/` of the management UI; a wildcard bind address shown as `localhost`.
fn ui_url(addrs: &ListenAddrs) -> Option<String> {
    let (scheme, addr) = match (addrs.http, addrs.https) {
        (Some(http), _) => ("http", http),
        (None, Some(https)) => ("https", https),
        (None, None) => return None,
    };
    let host = match addr.ip() {
        ip if ip.is_unspecified() => "localhost".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    Some(format!("{scheme}://{host}:{}/", addr.port()))
}

/// Where each listener listens; `None` where it is off.
struct ListenAddrs {
    amqp: Option<SocketAddr>,
    http: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    amqps: Option<SocketAddr>,
    https: Option<SocketAddr>,
    metrics_tls: Option<SocketAddr>,
    sqs: Option<SocketAddr>,
    sqs_tls: Option<SocketAddr>,
}

impl ListenAddrs {
    fn of(server: &Server) -> ListenAddrs {
        let tls = server.tls.as_ref();
        ListenAddrs {
            amqp: server.amqp_addr().ok(),
            http: server.http_addr().ok(),
            metrics: server.metrics_addr().ok(),
            amqps: server.amqps_addr().ok(),
            https: server.https_addr().ok(),
            metrics_tls: tls.and_then(|tls| tls.metrics.local_addr().ok()),
            sqs: server.sqs_addr().ok(),
            sqs_tls: tls.and_then(|tls| local_addr(tls.sqs.as_ref()).ok()),
        }
    }

    /// The listeners that run, under RabbitMQ's protocol names (and ours for the SQS endpoint).
    fn listeners(&self) -> Vec<hourglass_mgmt::Listener> {
        [
            ("amqp", self.amqp),
            ("amqp/ssl", self.amqps),
            ("http", self.http),
            ("https", self.https),
            ("http/prometheus", self.metrics),
            ("https/prometheus", self.metrics_tls),
            ("sqs", self.sqs),
            ("sqs/ssl", self.sqs_tls),
        ]
        .into_iter()
        .filter_map(|(protocol, addr)| addr.map(|a| hourglass_mgmt::Listener { protocol, port: a.port() }))
        .collect()
    }

    /// The address the node reports (the AMQP listener's, else the AMQPS one's).
    fn ip(&self) -> std::net::IpAddr {
        let any = self.amqp.or(self.amqps).or(self.http).or(self.https);
        any.map_or(std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), |a| a.ip())
    }
}

/// A listener's port for the API's node listing; 0 where it is off.
fn port(addr: Option<SocketAddr>) -> u16 {
    addr.map_or(0, |a| a.port())
}

fn local_addr(listener: Option<&TcpListener>) -> std::io::Result<SocketAddr> {
    match listener {
        Some(listener) => listener.local_addr(),
        None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "listener switched off")),
    }
}

/// The next socket from the plain or the TLS AMQP listener (whichever exist), and whether it came
/// over TLS.
async fn accept_either(
    plain: Option<&TcpListener>,
    tls: Option<&TcpListener>,
) -> (std::io::Result<(tokio::net::TcpStream, SocketAddr)>, bool) {
    async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
        match listener {
            Some(listener) => listener.accept().await,
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        accepted = accept(plain) => (accepted, false),
        accepted = accept(tls) => (accepted, true),
    }
}

/// A job queue for the management API whose jobs are forwarded, in order, into the broker's input
/// queue; the forwarder ends when the broker's queue closes or every job sender is gone.
fn forward_jobs(broker: mpsc::Sender<broker_task::BrokerInput>) -> mpsc::Sender<hourglass_mgmt::JobRequest> {
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
pub fn shutdown_signal() -> impl Future<Output = ()> {
    // The handlers are installed here, at once — not when the future is first polled, which may
    // be after the start-up line: a SIGTERM sent as soon as the broker says it listens must
    // still close it cleanly, not kill it with the default action.
    #[cfg(unix)]
    let mut handlers = {
        use tokio::signal::unix::{signal, SignalKind};
        (signal(SignalKind::terminate()).ok(), signal(SignalKind::interrupt()).ok())
    };
    async move {
        #[cfg(unix)]
        {
            let term = async {
                match handlers.0.as_mut() {
                    Some(term) => drop(term.recv().await),
                    None => std::future::pending().await,
                }
            };
            let int = async {
                match handlers.1.as_mut() {
                    Some(int) => drop(int.recv().await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term => {}
                _ = int => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The secrets key in `path` (made when missing), refused inside the data directory: a copy of
/// the data directory alone must not reveal access keys' secrets (docs/sqs.md).
fn secrets_key(
    path: &std::path::Path,
    data_dir: &std::path::Path,
) -> anyhow::Result<hourglass_mgmt::users::SecretsKey> {
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (key, data) = (absolute(path), absolute(data_dir));
    let canonical = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let key_dir = key.parent().map(canonical).unwrap_or_default();
    if key_dir.starts_with(canonical(&data)) {
        anyhow::bail!("secrets_key_file {} is inside the data directory {}: put it outside, so a copy of the data directory does not reveal access keys", path.display(), data_dir.display());
    }
    hourglass_mgmt::users::SecretsKey::read_or_create(path).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secrets key file inside the data directory is refused (a copy of the data directory
    /// would then reveal access keys' secrets); outside it, it is made and read back.
    #[test]
    fn the_secrets_key_must_live_outside_the_data_directory() {
        let root = std::env::temp_dir().join(format!("hg-secrets-key-{}", std::process::id()));
        let data = root.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let inside = secrets_key(&data.join("secrets.key"), &data).unwrap_err();
        assert!(inside.to_string().contains("inside the data directory"), "{inside}");
        assert!(secrets_key(&data.join("sub/../secrets.key"), &data).is_err());
        assert!(!data.join("secrets.key").exists(), "nothing made inside");
        secrets_key(&root.join("secrets.key"), &data).unwrap();
        secrets_key(&root.join("secrets.key"), &data).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
