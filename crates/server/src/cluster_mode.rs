//! A clustered node's life (docs/clustering.md): join etcd; follow — take the leader's
//! replication stream on the replication port and forward the client ports to the leader — until
//! elected; then lead: serve as the single-node broker does, on the replicated data directory,
//! with a confirm waiting for the majority. A leader that loses its term steps down by starting
//! over as a follower (the process re-executes itself: nothing of the old term survives in it).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hourglass_cluster::proxy::{forward, PortOf, Protocol, Upstream};
use hourglass_cluster::repl::{
    ClusterSecret, FileDigests, Follower, Hub, ReplicatedStorage, ReplicationAuth,
};
use hourglass_cluster::{ClusterSettings, Coordinator, Elected, NodeRecord, Role};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::cluster::{host_name, ClusterConfig};
use crate::persistence::{lock_data_dir, StorageWrapper};
use crate::supervise::{die_injected, Died, InjectedDeath, Part};
use crate::{listen, Config, Server, ServerHooks};

/// How long a leader that lost its term lets its clients' connections close (320) before it
/// replaces itself with a follower.
const STEP_DOWN_GRACE: Duration = Duration::from_secs(2);
/// How long a leader's server gets to close its connections at shutdown before the process
/// goes on without it: a deposed leader's store writer never returns (nothing more may be
/// confirmed), and SIGTERM must end the process within 10 s in every state (issue #21).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);
/// How long revoking the lease may take at exit; an etcd that does not answer lets it expire
/// by itself, one TTL later.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Set by a stepped-down leader for the process that replaces it: how many milliseconds that
/// process waits before it may campaign, so that a node on the other side of whatever made it
/// step down gets the first chance to lead (internal; never set by an operator).
const CAMPAIGN_HOLDOFF_ENV: &str = "HOURGLASS_INTERNAL_CAMPAIGN_HOLDOFF_MS";
/// The hold-off, in lease TTLs.
const CAMPAIGN_HOLDOFF_TTLS: u32 = 2;

/// Whether SIGTERM/SIGINT came, seen from every phase (a leader must not restart itself as a
/// follower once asked to stop).
#[derive(Clone)]
struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    fn watch(signal: impl Future<Output = ()> + Send + 'static) -> Shutdown {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            signal.await;
            let _ = tx.send(true);
            // Keep the sender: a finished watch would read as a shutdown that never comes.
            std::future::pending::<()>().await;
        });
        Shutdown(rx)
    }

    async fn requested(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}

/// Runs this node until `shutdown` completes (or, after a step-down, re-executes it). etcd or
/// peers that cannot be reached never end it (issue #21): it retries with back-off and its client
/// ports answer 320 / 503 while it has no role.
pub async fn run(
    config: Config,
    cluster: ClusterConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shutdown = Shutdown::watch(shutdown);
    let ip = listen::resolve_bind(config.bind);
    let lock = lock_data_dir(&config.data_dir)?;
    let settings = settings(&config, &cluster, ip)?;
    let endpoints = cluster.etcd_endpoints.join(",");
    // The client ports listen before etcd answers: a client is told to come back (320 / 503)
    // rather than refused, and the node is visibly up.
    let (upstream_tx, upstream) = watch::channel(Upstream::Unavailable);
    let proxies = bind_client_ports(&config, ip, &upstream)?;
    let stop = Arc::new(AtomicBool::new(false));
    let joining = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || Coordinator::join_retrying(settings, &stop))
    };
    let joined = tokio::select! {
        _ = shutdown.requested() => None,
        joined = joining => Some(joined),
    };
    let Some(joined) = joined else {
        stop.store(true, Ordering::SeqCst);
        return Ok(());
    };
    let coordinator = match joined {
        Ok(Ok(Some(coordinator))) => coordinator,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(error)) => {
            return Err(error).with_context(|| format!("joining the cluster through etcd at {endpoints}"))
        }
        Err(error) => return Err(Died::new(Part::Coordinator, error.to_string()).into()),
    };
    let followed = follow(&config, &cluster, ip, &coordinator, upstream_tx, proxies, &shutdown).await;
    let (elected, digests) = match followed {
        Ok(Some(elected)) => elected,
        Ok(None) => {
            leave_bounded(&coordinator).await;
            return Ok(());
        }
        Err(error) => {
            leave_bounded(&coordinator).await;
            return Err(error);
        }
    };
    drop(lock);
    lead(config, coordinator, elected, digests, shutdown).await
}

/// What the coordinator is told, from the node's settings (files read here: a bad one stops
/// the start, naming it).
fn settings(
    config: &Config,
    cluster: &ClusterConfig,
    ip: std::net::IpAddr,
) -> anyhow::Result<ClusterSettings> {
    let host = cluster.advertise_host.clone().unwrap_or_else(|| {
        if ip.is_unspecified() {
            host_name()
        } else {
            ip.to_string()
        }
    });
    let replication_tls = match (&config.tls, cluster.replication_tls) {
        (_, false) => None,
        (Some(tls), true) => Some(crate::tls::replication(tls).context("replication TLS")?),
        (None, true) => anyhow::bail!("replication_tls needs tls_cert, tls_key and tls_ca"),
    };
    // config::cluster::resolve made sure there is a secret file or replication TLS.
    let cluster_secret = match &cluster.cluster_secret_file {
        Some(path) => Some(ClusterSecret::read(path)?),
        None => None,
    };
    let etcd_tls = match &cluster.etcd_tls {
        None => None,
        Some(files) => Some(read_etcd_tls(files)?),
    };
    Ok(ClusterSettings {
        etcd_tls,
        etcd_endpoints: cluster.etcd_endpoints.clone(),
        cluster_name: cluster.cluster_name.clone(),
        node: NodeRecord {
            name: cluster.node_name.clone(),
            host,
            amqp_port: config.amqp_port,
            http_port: config.http_port,
            replication_port: cluster.replication_port,
            amqps_port: config.tls.as_ref().map(|tls| tls.amqps_port),
            https_port: config.tls.as_ref().map(|tls| tls.https_port),
            sqs_port: config.sqs_port,
            sqs_tls_port: config.tls.as_ref().and_then(|tls| tls.sqs_port),
        },
        campaign_not_before: campaign_holdoff().map(|holdoff| std::time::Instant::now() + holdoff),
        lease_ttl_secs: cluster.lease_ttl_secs,
        min_in_sync: cluster.min_in_sync,
        data_dir: config.data_dir.clone(),
        replication_tls,
        cluster_secret,
    })
}

/// The hold-off a stepped-down predecessor of this process asked for ([`CAMPAIGN_HOLDOFF_ENV`]).
fn campaign_holdoff() -> Option<Duration> {
    let ms = std::env::var(CAMPAIGN_HOLDOFF_ENV).ok()?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ms.min(60_000)))
}

/// Binds the client ports of a node that does not lead, each forwarding to `upstream`.
fn bind_client_ports(
    config: &Config,
    ip: std::net::IpAddr,
    upstream: &watch::Receiver<Upstream>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut forwarded: Vec<(u16, &'static str, PortOf, Protocol)> = Vec::new();
    if config.plain.amqp {
        forwarded.push((config.amqp_port, "AMQP", |n| Some(n.amqp()), Protocol::Amqp));
    }
    if config.plain.http {
        forwarded.push((config.http_port, "HTTP API", |n| Some(n.http()), Protocol::Http));
    }
    if let Some(port) = config.sqs_port {
        // Signatures cover the Host header, which passes through unchanged.
        forwarded.push((port, "SQS", NodeRecord::sqs, Protocol::Http));
    }
    if let Some(tls) = &config.tls {
        // TLS ends on the leader: the bytes pass through; on a leader change they are only cut.
        forwarded.push((tls.amqps_port, "AMQPS", NodeRecord::amqps, Protocol::Tls));
        forwarded.push((tls.https_port, "HTTPS API", NodeRecord::https, Protocol::Tls));
        if let Some(port) = tls.sqs_port {
            forwarded.push((port, "SQS over TLS", NodeRecord::sqs_tls, Protocol::Tls));
        }
    }
    let mut proxies = Vec::new();
    for (port, what, port_of, protocol) in forwarded {
        let listener = listen::bind(ip, port, what)?;
        proxies.push(tokio::spawn(forward(listener, upstream.clone(), port_of, protocol)));
    }
    Ok(proxies)
}

/// The follower phase; what this node was elected to, or `None` on shutdown.
async fn follow(
    config: &Config,
    cluster: &ClusterConfig,
    ip: std::net::IpAddr,
    coordinator: &Arc<Coordinator>,
    upstream: watch::Sender<Upstream>,
    mut proxies: Vec<JoinHandle<()>>,
    shutdown: &Shutdown,
) -> anyhow::Result<Option<(Elected, Arc<FileDigests>)>> {
    let replication = listen::bind(ip, cluster.replication_port, "replication")?.into_std()?;
    let settings = coordinator.settings();
    let auth = ReplicationAuth {
        node: settings.node.name.clone(),
        secret: settings.cluster_secret.clone(),
        tls: settings.replication_tls.clone(),
    };
    // What the node knows of its files' contents, kept as a follower and then as the leader
    // (hourglass_cluster::repl::FileDigests): a catch-up after a failover need not read them.
    let digests = Arc::new(FileDigests::default());
    let follower = Follower::new(config.data_dir.clone(), coordinator.fence.clone(), auth, digests.clone())
        .context("opening the data directory for replication")?;
    let receiver = follower.clone();
    std::thread::Builder::new().name("hg-repl-listen".into()).spawn(move || receiver.serve(replication))?;
    proxies.push(track_leader(coordinator.roles(), upstream));
    if config.plain.metrics {
        let metrics = listen::bind(ip, config.metrics_port, "metrics")?;
        let gauges = hourglass_mgmt::follower_metrics_router(Arc::new(Status(coordinator.clone())));
        let limits = config.http;
        proxies.push(tokio::spawn(async move {
            let _ = hourglass_mgmt::serve(metrics, gauges, limits, None, std::future::pending()).await;
        }));
    }
    tracing::info!(
        node = %cluster.node_name,
        replication_port = cluster.replication_port,
        "following: client ports forward to the leader"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (elected_coordinator, elected_stop) = (coordinator.clone(), stop.clone());
    let mut elected =
        tokio::task::spawn_blocking(move || elected_coordinator.follow_until_elected(&elected_stop));
    let elected = tokio::select! {
        _ = shutdown.requested() => Ok(None),
        elected = &mut elected => elected,
    };
    stop.store(true, Ordering::SeqCst);
    for proxy in proxies {
        proxy.abort();
        let _ = proxy.await;
    }
    let elected = match elected {
        Ok(elected) => elected,
        Err(error) => {
            let reason = match error.try_into_panic() {
                Ok(payload) => crate::supervise::panic_message(payload.as_ref()),
                Err(error) => error.to_string(),
            };
            return Err(Died::new(Part::Coordinator, reason).into());
        }
    };
    if let Some(elected) = &elected {
        follower.stop(elected.term);
    }
    Ok(elected.map(|elected| (elected, digests)))
}

/// Feeds `upstream` the leader to forward to as the coordinator's view of the roles changes.
fn track_leader(mut roles: watch::Receiver<Role>, upstream: watch::Sender<Upstream>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let now = Upstream::of(&roles.borrow_and_update());
            upstream.send_if_modified(|was| std::mem::replace(was, now.clone()) != now);
            if roles.changed().await.is_err() {
                break;
            }
        }
        // The coordinator is gone (this node leads now): forwarded connections end.
        upstream.send_replace(Upstream::Unavailable);
    })
}

/// How a leader's term ended, as its coordination thread reports it.
#[derive(Clone, Debug)]
enum LeadEnd {
    SteppedDown,
    /// The coordination thread panicked (supervision).
    CoordinatorDied(String),
}

/// The leader phase: the broker on the replicated data directory, until shutdown, step-down or
/// the death of a part.
async fn lead(
    config: Config,
    coordinator: Arc<Coordinator>,
    elected: Elected,
    digests: Arc<FileDigests>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let min = {
        let coordinator = coordinator.clone();
        tokio::task::spawn_blocking(move || coordinator.min_in_sync_now()).await?
    };
    let hub = Hub::new(config.data_dir.clone(), min, elected.recorded.clone(), digests);
    let stop = Arc::new(AtomicBool::new(false));
    let inject = InjectedDeath::from_env();
    let ended =
        spawn_lead_thread(&coordinator, &hub, elected, &stop, InjectedDeath::of(inject, Part::Coordinator))?;
    let bound = Server::bind_with(config, leader_hooks(&coordinator, &hub, inject)).await;
    let served = match bound {
        Ok(server) => serve_term(server, &ended, &shutdown).await,
        Err(error) => Err(error),
    };
    stop.store(true, Ordering::SeqCst);
    hub.depose();
    let end = ended.borrow().clone();
    after_term(&coordinator, served, end, &shutdown).await
}

/// What a leader's server is given: storage replicated through `hub`, the cluster's status and
/// names.
fn leader_hooks(
    coordinator: &Arc<Coordinator>,
    hub: &Arc<Hub>,
    inject: Option<InjectedDeath>,
) -> ServerHooks {
    let hub = hub.clone();
    let storage: StorageWrapper =
        Arc::new(move |inner, prefix| Arc::new(ReplicatedStorage::new(inner, prefix, hub.clone())));
    ServerHooks {
        storage: Some(storage),
        cluster: Some(Arc::new(Status(coordinator.clone()))),
        node_name: Some(coordinator.settings().node.name.clone()),
        cluster_name: Some(coordinator.settings().cluster_name.clone()),
        inject_death: inject,
    }
}

/// Serves until shutdown or the end of the term. Once either comes, the server gets a bounded
/// time to close its clients (320): after a step-down the store's writer is blocked for good
/// (nothing more may be confirmed), so nothing waits for it.
async fn serve_term(
    server: Server,
    ended: &watch::Receiver<Option<LeadEnd>>,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let term_over = |mut ended: watch::Receiver<Option<LeadEnd>>, shutdown: Shutdown| async move {
        tokio::select! {
            _ = shutdown.requested() => {}
            _ = ended.wait_for(Option::is_some) => {}
        }
    };
    let run = server.run(term_over(ended.clone(), shutdown.clone()));
    tokio::pin!(run);
    let bounded = async {
        term_over(ended.clone(), shutdown.clone()).await;
        let grace = if shutdown.is_requested() { SHUTDOWN_BOUND } else { STEP_DOWN_GRACE };
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = &mut run => result,
        _ = bounded => Ok(()),
    }
}

/// After the term: a dead part of the server or a dead coordinator gives back the lease first (a
/// follower takes over at once, not after a TTL) and ends the process; a step-down restarts it
/// as a follower; a shutdown leaves the cluster.
async fn after_term(
    coordinator: &Arc<Coordinator>,
    served: anyhow::Result<()>,
    end: Option<LeadEnd>,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    if let Err(error) = served {
        leave_bounded(coordinator).await;
        if refused_definitions(&error) && !shutdown.is_requested() {
            // Every follower holds a copy of the data directory, and catch-up replaces any file
            // whose bytes differ from the leader's: this node gives up the term and takes the
            // copy of whoever leads next, instead of staying down.
            tracing::error!(
                %error,
                "this node's definitions do not read: it gives up the term and restarts as a \
                 follower, whose catch-up replaces them with the next leader's copy"
            );
            let holdoff = Duration::from_secs(coordinator.settings().lease_ttl_secs) * CAMPAIGN_HOLDOFF_TTLS;
            return Err(restart_as_follower(holdoff));
        }
        return Err(error);
    }
    match end {
        Some(LeadEnd::CoordinatorDied(reason)) => {
            let died = Died::new(Part::Coordinator, reason);
            leave_bounded(coordinator).await;
            Err(died.into())
        }
        Some(LeadEnd::SteppedDown) if !shutdown.is_requested() => {
            let holdoff = Duration::from_secs(coordinator.settings().lease_ttl_secs) * CAMPAIGN_HOLDOFF_TTLS;
            Err(restart_as_follower(holdoff))
        }
        _ => {
            leave_bounded(coordinator).await;
            Ok(())
        }
    }
}

/// Runs the coordinator's leader loop on its own thread; how the term ended appears in the watch
/// (a panic included: supervision). Test only: with `die_after`, the loop is stopped then and
/// the thread panics, as a dying coordinator would.
fn spawn_lead_thread(
    coordinator: &Arc<Coordinator>,
    hub: &Arc<Hub>,
    elected: Elected,
    stop: &Arc<AtomicBool>,
    die_after: Option<Duration>,
) -> std::io::Result<watch::Receiver<Option<LeadEnd>>> {
    let (ended_tx, ended) = watch::channel(None::<LeadEnd>);
    let (coordinator, hub, stop) = (coordinator.clone(), hub.clone(), stop.clone());
    if let Some(after) = die_after {
        let timer_stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            timer_stop.store(true, Ordering::SeqCst);
        });
    }
    std::thread::Builder::new().name("hg-cluster-lead".into()).spawn(move || {
        let run = std::panic::AssertUnwindSafe(|| {
            let why = coordinator.lead(hub, &elected, &stop);
            if die_after.is_some() {
                die_injected(Part::Coordinator);
            }
            why
        });
        let end = match std::panic::catch_unwind(run) {
            // The coordinator logged the reason ("stepping down as leader").
            Ok(_) => LeadEnd::SteppedDown,
            Err(payload) => LeadEnd::CoordinatorDied(crate::supervise::panic_message(payload.as_ref())),
        };
        ended_tx.send_replace(Some(end));
    })?;
    Ok(ended)
}

/// Whether starting the leader's server failed because the stored definitions do not read.
fn refused_definitions(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<crate::catalog_file::DefinitionsRefused>())
}

/// Revokes this node's lease (its record and, if it leads, the leader key go at once), giving up
/// after [`LEAVE_TIMEOUT`]: an unreachable etcd must not hold up an exit.
async fn leave_bounded(coordinator: &Arc<Coordinator>) {
    let leaving = {
        let coordinator = coordinator.clone();
        tokio::task::spawn_blocking(move || coordinator.leave())
    };
    match tokio::time::timeout(LEAVE_TIMEOUT, leaving).await {
        Ok(Ok(Ok(()))) => tracing::info!("left the cluster: lease revoked"),
        Ok(Ok(Err(error))) => tracing::warn!(%error, "could not revoke the lease; it expires by itself"),
        _ => tracing::warn!("etcd did not take the lease back in time; it expires by itself"),
    }
}

/// Replaces this process with a fresh one of the same program and command line: it rejoins as a
/// follower, catches up, and does not campaign for `holdoff`. Returns only if that fails.
///
/// The program is the one running, not the file at its path: on Linux `/proc/self/exe` still
/// executes it after its file was replaced or removed (a package upgrade under a running
/// cluster), where a lookup by path found no file and left the node down for good.
fn restart_as_follower(holdoff: Duration) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    tracing::warn!("restarting as a follower");
    let exe = match running_program() {
        Ok(exe) => exe,
        Err(error) => return anyhow::anyhow!("cannot find this program to restart it: {error}"),
    };
    let mut command = std::process::Command::new(exe);
    if let Some(name) = std::env::args_os().next() {
        command.arg0(name);
    }
    let error = command
        .args(std::env::args_os().skip(1))
        .env(CAMPAIGN_HOLDOFF_ENV, holdoff.as_millis().to_string())
        .exec();
    anyhow::anyhow!("cannot restart as a follower: {error}")
}

/// What executes the running program again: its own image where the OS offers it.
fn running_program() -> std::io::Result<std::path::PathBuf> {
    let own = std::path::Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && own.exists() {
        return Ok(own.to_path_buf());
    }
    std::env::current_exe()
}

/// `/api/cluster` from the coordinator.
struct Status(Arc<Coordinator>);

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Status").field(&self.0.settings().node.name).finish()
    }
}

impl hourglass_mgmt::ClusterStatus for Status {
    fn status(&self) -> serde_json::Value {
        self.0.status_json()
    }

    fn gauges(&self) -> hourglass_mgmt::ClusterGauges {
        let (leader, term, in_sync, lag_records) = self.0.gauges();
        hourglass_mgmt::ClusterGauges { leader, term, in_sync, lag_records }
    }
}

/// The PEM files for TLS to etcd, read (an unreadable one stops the start, naming it).
fn read_etcd_tls(
    files: &crate::config::cluster::EtcdTlsFiles,
) -> anyhow::Result<hourglass_cluster::etcd::EtcdTls> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("reading the etcd TLS file {}", path.display()))
    };
    let client = match &files.client {
        Some((cert, key)) => Some((read(cert)?, read(key)?)),
        None => None,
    };
    Ok(hourglass_cluster::etcd::EtcdTls { ca_pem: read(&files.ca)?, client })
}
