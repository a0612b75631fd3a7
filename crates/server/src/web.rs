//! The HTTP services: the management API and UI, Prometheus metrics and the SQS endpoint, each
//! served on its plain and TLS listeners until shutdown.

use hourglass_mgmt::tls::LiveTlsConfig;
use hourglass_mgmt::{AppState, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;

/// The HTTP listeners bound for the services (`None`: that one is off).
pub struct Listeners {
    pub http: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
    /// The HTTPS API's and metrics' listeners, with their live TLS settings.
    pub https: Option<(TcpListener, TcpListener, LiveTlsConfig)>,
    pub sqs: Option<TcpListener>,
    pub sqs_tls: Option<(TcpListener, LiveTlsConfig)>,
}

/// Serves every listener until `shutdown_rx` turns true; the tasks, one per listener. The SQS
/// endpoint's message-move tasks written as running before a restart or failover are taken up
/// before it answers.
pub async fn serve(
    listeners: Listeners,
    mgmt: AppState,
    config: &Config,
    shutdown_rx: &watch::Receiver<bool>,
) -> JoinSet<std::io::Result<()>> {
    let mut tasks = JoinSet::new();
    // The SQS endpoint, plain and over TLS: one state (move tasks, sequence numbers) for both,
    // held only by their routers: a broker handle kept here would keep the broker task from
    // seeing its inputs close at shutdown.
    let sqs_listeners: Vec<_> = listeners
        .sqs
        .map(|listener| (listener, None))
        .into_iter()
        .chain(listeners.sqs_tls.map(|(l, t)| (l, Some(t))))
        .collect();
    if !sqs_listeners.is_empty() {
        let sqs_state = hourglass_sqs::SqsState {
            broker: mgmt.broker.clone(),
            users: mgmt.users.clone(),
            logins: mgmt.logins.clone(),
            secrets: mgmt.secrets.clone(),
            moves: Default::default(),
            clock: hourglass_sqs::system_clock,
            resources: mgmt.node.resources.clone(),
            long_polls: std::sync::Arc::new(hourglass_sqs::LongPolls::with_max(config.sqs_max_long_polls)),
            policies: Default::default(),
            stop: shutdown_rx.clone(),
        };
        // Message-move tasks written as running before a restart or failover go on; listed
        // before the endpoint answers its first request.
        hourglass_sqs::resume_move_tasks(sqs_state.clone()).await;
        for (listener, tls) in sqs_listeners {
            let stopped = stopped(shutdown_rx);
            let router = hourglass_sqs::router(sqs_state.clone());
            tasks.spawn(hourglass_mgmt::serve(listener, router, config.http, tls, stopped));
        }
    }
    for (listener, router, tls) in http_services(listeners.http, listeners.metrics, listeners.https, mgmt) {
        tasks.spawn(hourglass_mgmt::serve(listener, router, config.http, tls, stopped(shutdown_rx)));
    }
    tasks
}

/// Completes once `shutdown_rx` turns true (or its sender is gone).
pub fn stopped(
    shutdown_rx: &watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut stop = shutdown_rx.clone();
    async move {
        let _ = stop.wait_for(|stop| *stop).await;
    }
}

/// The HTTP listeners that run, each with its router (API or metrics) and, for HTTPS, the TLS
/// settings: plain API, plain metrics, then `https` = (API, metrics, settings) over TLS.
fn http_services(
    http: Option<TcpListener>,
    metrics: Option<TcpListener>,
    https: Option<(TcpListener, TcpListener, LiveTlsConfig)>,
    mgmt: AppState,
) -> Vec<(TcpListener, Router, Option<LiveTlsConfig>)> {
    let (api, metrics_api) = (hourglass_mgmt::api_router(mgmt.clone()), hourglass_mgmt::metrics_router(mgmt));
    let (https, metrics_tls, live) = match https {
        Some((https, metrics_tls, live)) => (Some(https), Some(metrics_tls), Some(live)),
        None => (None, None, None),
    };
    [
        (http, api.clone(), None),
        (metrics, metrics_api.clone(), None),
        (https, api, live.clone()),
        (metrics_tls, metrics_api, live),
    ]
    .into_iter()
    .filter_map(|(listener, router, tls)| listener.map(|listener| (listener, router, tls)))
    .collect()
}
