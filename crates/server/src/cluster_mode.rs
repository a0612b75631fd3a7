//! A clustered node's life (docs/clustering.md): join etcd; follow — take the leader's
//! replication stream on the replication port and forward the client ports to the leader — until
//! elected; then lead: serve as the single-node broker does, on the replicated data directory,
//! with a confirm waiting for the majority. A leader that loses its term steps down by starting
//! over as a follower (the process re-executes itself: nothing of the old term survives in it).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use hourglass_cluster::proxy::{forward, PortOf, Protocol};
use hourglass_cluster::repl::{ClusterSecret, Follower, Hub, ReplicatedStorage, ReplicationAuth};
use hourglass_cluster::{ClusterSettings, Coordinator, NodeRecord, Role, StepDown};
use tokio::sync::{oneshot, watch};

use crate::config::cluster::{host_name, ClusterConfig};
use crate::persistence::{lock_data_dir, StorageWrapper};
use crate::{listen, Config, Server, ServerHooks};

/// How long a leader that lost its term lets its clients' connections close (320) before it
/// replaces itself with a follower.
const STEP_DOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a starting node keeps trying to reach etcd before it gives up: an etcd started
/// beside it (a compose file, a test) may listen a moment before it serves.
const JOIN_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(15);
/// The pause between two tries.
const JOIN_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs this node until `shutdown` completes (or, after a step-down, re-executes it).
pub async fn run(
    config: Config,
    cluster: ClusterConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let ip = listen::resolve_bind(config.bind);
    let host = cluster.advertise_host.clone().unwrap_or_else(|| {
        if ip.is_unspecified() {
            host_name()
        } else {
            ip.to_string()
        }
    });
    let lock = lock_data_dir(&config.data_dir)?;
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
    let settings = ClusterSettings {
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
        },
        lease_ttl_secs: cluster.lease_ttl_secs,
        min_in_sync: cluster.min_in_sync,
        data_dir: config.data_dir.clone(),
        replication_tls,
        cluster_secret,
    };
    let endpoints = cluster.etcd_endpoints.join(",");
    let coordinator = tokio::task::spawn_blocking(move || join_retrying(settings))
        .await
        .context("joining the cluster")?
        .with_context(|| format!("joining the cluster through etcd at {endpoints}"))?;
    tokio::pin!(shutdown);
    let Some(term) = follow(&config, &cluster, ip, &coordinator, &mut shutdown).await? else {
        coordinator.leave();
        return Ok(());
    };
    drop(lock);
    lead(config, coordinator, term, shutdown).await
}

/// The follower phase; the term this node was elected at, or `None` on shutdown.
async fn follow(
    config: &Config,
    cluster: &ClusterConfig,
    ip: std::net::IpAddr,
    coordinator: &Arc<Coordinator>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> anyhow::Result<Option<u64>> {
    let replication = listen::bind(ip, cluster.replication_port, "replication")?.into_std()?;
    let settings = coordinator.settings();
    let auth = ReplicationAuth {
        node: settings.node.name.clone(),
        secret: settings.cluster_secret.clone(),
        tls: settings.replication_tls.clone(),
    };
    let follower = Follower::new(config.data_dir.clone(), coordinator.fence.clone(), auth)
        .context("opening the data directory for replication")?;
    let receiver = follower.clone();
    std::thread::Builder::new().name("hg-repl-listen".into()).spawn(move || receiver.serve(replication))?;
    let leader = leader_watch(coordinator.roles());
    let mut forwarded: Vec<(u16, &'static str, PortOf, Protocol)> = Vec::new();
    if config.plain.amqp {
        forwarded.push((config.amqp_port, "AMQP", |n| Some(n.amqp()), Protocol::Amqp));
    }
    if config.plain.http {
        forwarded.push((config.http_port, "HTTP API", |n| Some(n.http()), Protocol::Http));
    }
    if let Some(tls) = &config.tls {
        // TLS ends on the leader: the bytes pass through; on a leader change they are only cut.
        forwarded.push((tls.amqps_port, "AMQPS", NodeRecord::amqps, Protocol::Tls));
        forwarded.push((tls.https_port, "HTTPS API", NodeRecord::https, Protocol::Tls));
    }
    let mut proxies = Vec::new();
    for (port, what, port_of, protocol) in forwarded {
        let listener = listen::bind(ip, port, what)?;
        proxies.push(tokio::spawn(forward(listener, leader.clone(), port_of, protocol)));
    }
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
    let term = tokio::select! {
        _ = shutdown.as_mut() => None,
        term = &mut elected => term.context("election task")?,
    };
    stop.store(true, Ordering::SeqCst);
    for proxy in proxies {
        proxy.abort();
        let _ = proxy.await;
    }
    if let Some(term) = term {
        follower.stop(term);
    }
    Ok(term)
}

/// The leader to forward to as the roles change: `None` while this node has none (an
/// election, or it leads itself).
fn leader_watch(mut roles: watch::Receiver<Role>) -> watch::Receiver<Option<NodeRecord>> {
    let leader = |role: &Role| match role {
        Role::Follower { leader: Some(node), .. } => Some(node.clone()),
        _ => None,
    };
    let (tx, rx) = watch::channel(leader(&roles.borrow()));
    tokio::spawn(async move {
        while roles.changed().await.is_ok() {
            let node = leader(&roles.borrow_and_update());
            tx.send_if_modified(|now| {
                if *now == node {
                    return false;
                }
                *now = node;
                true
            });
        }
        // The coordinator is gone (this node leads now): forwarded connections end.
        tx.send_replace(None);
    });
    rx
}

/// The leader phase: the broker on the replicated data directory, until shutdown or step-down.
async fn lead(
    config: Config,
    coordinator: Arc<Coordinator>,
    term: u64,
    shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> anyhow::Result<()> {
    let min = {
        let coordinator = coordinator.clone();
        tokio::task::spawn_blocking(move || coordinator.min_in_sync_now()).await?
    };
    let hub = Hub::new(config.data_dir.clone(), min);
    let stop = Arc::new(AtomicBool::new(false));
    let (stepped_tx, stepped_rx) = oneshot::channel::<StepDown>();
    {
        let (coordinator, hub, stop) = (coordinator.clone(), hub.clone(), stop.clone());
        std::thread::Builder::new().name("hg-cluster-lead".into()).spawn(move || {
            let _ = stepped_tx.send(coordinator.lead(hub, term, &stop));
        })?;
    }
    let wrap_hub = hub.clone();
    let storage: StorageWrapper =
        Arc::new(move |inner, prefix| Arc::new(ReplicatedStorage::new(inner, prefix, wrap_hub.clone())));
    let hooks = ServerHooks {
        storage: Some(storage),
        cluster: Some(Arc::new(Status(coordinator.clone()))),
        node_name: Some(coordinator.settings().node.name.clone()),
    };
    let server = Server::bind_with(config, hooks).await?;
    let stepped_down = Arc::new(tokio::sync::Notify::new());
    let notify = stepped_down.clone();
    let until = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = stepped_rx => notify.notify_one(),
        }
    };
    let run = server.run(until);
    tokio::pin!(run);
    // After a step-down, clients get their 320 close; the store's writer is blocked for good
    // (nothing more may be confirmed), so the process is replaced after a bounded grace instead
    // of waiting for it.
    let replaced = async {
        stepped_down.notified().await;
        tokio::time::sleep(STEP_DOWN_GRACE).await;
    };
    tokio::select! {
        result = &mut run => result?,
        _ = replaced => {}
    }
    stop.store(true, Ordering::SeqCst);
    if hub.is_deposed() {
        return Err(restart_as_follower());
    }
    hub.depose();
    coordinator.leave();
    Ok(())
}

/// Replaces this process with a fresh one of the same command line: it rejoins as a follower
/// and catches up. Returns only if that fails.
fn restart_as_follower() -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    tracing::warn!("restarting as a follower");
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => return anyhow::anyhow!("cannot find this program to restart it: {error}"),
    };
    let error = std::process::Command::new(exe).args(std::env::args_os().skip(1)).exec();
    anyhow::anyhow!("cannot restart as a follower: {error}")
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

/// Joins the cluster, trying again for [`JOIN_RETRY_FOR`] while etcd does not answer (logged
/// once); the last error after that.
fn join_retrying(
    settings: ClusterSettings,
) -> Result<std::sync::Arc<Coordinator>, hourglass_cluster::etcd::EtcdError> {
    let started = std::time::Instant::now();
    loop {
        match Coordinator::join(settings.clone()) {
            Ok(coordinator) => return Ok(coordinator),
            Err(error) if started.elapsed() < JOIN_RETRY_FOR => {
                if started.elapsed() < JOIN_RETRY_PAUSE {
                    tracing::warn!(%error, "etcd does not answer yet; trying again");
                }
                std::thread::sleep(JOIN_RETRY_PAUSE);
            }
            Err(error) => return Err(error),
        }
    }
}
