//! Partitions on a real network (issue #21): etcd, three `hourglass` nodes and the client each in
//! a network namespace on one bridge (tests/netns_support). Under a publisher that publishes
//! persistent messages with confirms (reconnecting, node by node, on any error) and a consumer
//! that acks, each test makes one fault: the leader cut from etcd only, the leader cut from its
//! followers only, the leader isolated, a follower isolated, the leader's links flapping, etcd
//! paused for 30 s. Paths are cut with blackhole routes (connects fail at once); two more tests
//! cut the leader from etcd, and isolate it, on a network that loses packets silently (connects
//! and requests hang). Each then asserts that no confirmed message was lost, none was delivered
//! twice unless flagged redelivered, confirms flowed through the majority side within 10 s of
//! the fault (of the heal, where no majority could confirm), and every node is in sync again
//! after the heal. Each prints its fault-to-first-confirm times and the publisher's connections.

mod cluster_support;
mod common;
mod netns_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Etcd};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use netns_support::{CutMode, Topology};

const QUEUE: &str = "partitions";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// How long a cut lasts (the default lease is 3 s).
const CUT: Duration = Duration::from_secs(15);
/// How long etcd stays paused.
const ETCD_PAUSE: Duration = Duration::from_secs(30);
/// Confirms must flow again (no gap longer than this) through the side that can confirm.
const CONFIRMS_AGAIN_WITHIN: Duration = Duration::from_secs(10);
/// The cluster must be in sync within this of starting, and again of the heal.
const IN_SYNC_WITHIN: Duration = Duration::from_secs(40);
/// Every confirmed message must have been consumed within this of the publisher's stop.
const CONSUMED_WITHIN: Duration = Duration::from_secs(40);
/// A client's patience: for a TCP connect and AMQP handshake, and for one confirm.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the consumer waits on any one step (setting up, a delivery, an ack) before it moves
/// to another node.
const CONSUMER_STEP: Duration = Duration::from_secs(5);
/// The publisher stops after this many messages (it publishes some 400 a second).
const MAX_MESSAGES: usize = 100_000;
/// How many topologies run at once (each has an etcd and three nodes; the machine has 2 cores).
const AT_ONCE: usize = 2;

/// A slot among [`AT_ONCE`], held for one test.
struct Slot;

static SLOTS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

impl Slot {
    fn take() -> Slot {
        let (taken, freed) = &SLOTS;
        let mut taken = taken.lock().unwrap_or_else(|p| p.into_inner());
        while *taken >= AT_ONCE {
            taken = freed.wait(taken).unwrap_or_else(|p| p.into_inner());
        }
        *taken += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (taken, freed) = &SLOTS;
        *taken.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// One connection the publisher opened.
struct Opened {
    node: String,
    at: Instant,
    first_confirm: Option<Instant>,
    /// Why it ended, if it did.
    ended: Option<String>,
}

/// What the client saw: confirms, connections, deliveries.
#[derive(Default)]
struct Seen {
    confirmed: BTreeSet<String>,
    confirm_times: Vec<Instant>,
    connections: Vec<Opened>,
    /// Every delivery: its body and whether it was flagged redelivered.
    deliveries: Vec<(String, bool)>,
    /// Connections that did not open: node, when it was tried, why.
    failed_connects: Vec<(String, Instant, String)>,
}

impl Seen {
    /// From `fault` to the first confirm after it on any connection.
    fn first_confirm_after(&self, fault: Instant) -> Option<Duration> {
        self.confirm_times.iter().find(|t| **t > fault).map(|t| *t - fault)
    }

    /// From `fault` to the first confirm on a connection opened after it.
    fn first_confirm_on_new_connection(&self, fault: Instant) -> Option<Duration> {
        let firsts = self.connections.iter().filter(|c| c.at > fault).filter_map(|c| c.first_confirm);
        firsts.min().map(|t| t - fault)
    }

    /// The longest stretch in `from..to` without a confirm (counting from `from` and to `to`).
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let inside = self.confirm_times.iter().copied().filter(|t| *t > from && *t < to);
        let points: Vec<Instant> = std::iter::once(from).chain(inside).chain([to]).collect();
        points.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
    }

    fn confirms_between(&self, from: Instant, to: Instant) -> usize {
        self.confirm_times.iter().filter(|t| **t > from && **t < to).count()
    }

    /// How the connections opened after `since` went: node, opened at (s after `since`), first
    /// confirm (s after opening), end.
    fn connections_since(&self, since: Instant) -> Vec<String> {
        let seconds = |d: Duration| format!("{:.1}s", d.as_secs_f64());
        let recent = self.connections.iter().filter(|c| c.at + Duration::from_secs(15) > since);
        let opened = recent.map(|c| {
            let opened = c.at.checked_duration_since(since).map_or("before".to_owned(), seconds);
            let first = c.first_confirm.map(|t| seconds(t - c.at));
            (c.at, format!("{} opened {opened} first confirm {first:?} ended {:?}", c.node, c.ended))
        });
        let failed = self.failed_connects.iter().filter(|(_, at, _)| *at > since);
        // A run of failures for the same reason is one line; a lone one names its node.
        let mut runs: Vec<(Instant, Instant, &str, &str, usize)> = Vec::new();
        for (node, at, why) in failed {
            match runs.last_mut() {
                Some((_, last, _, reason, count)) if *reason == why.as_str() => {
                    (*last, *count) = (*at, *count + 1)
                }
                _ => runs.push((*at, *at, node, why, 1)),
            }
        }
        let failed = runs.into_iter().map(|(first, last, node, why, count)| {
            let (from, to) = (seconds(first - since), seconds(last - since));
            let line = match count {
                1 => format!("{node} tried {from} did not open: {why}"),
                _ => format!("{count} connects (first to {node}) from {from} to {to} did not open: {why}"),
            };
            (first, line)
        });
        let mut lines: Vec<(Instant, String)> = opened.chain(failed).collect();
        lines.sort_by_key(|(at, _)| *at);
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

/// The client's view of the nodes: AMQP URLs in the order it tries them.
#[derive(Clone)]
struct Nodes {
    urls: Vec<(String, String)>,
}

impl Nodes {
    fn of(cluster: &Cluster) -> Nodes {
        Nodes { urls: cluster.nodes.iter().map(|n| (n.name.clone(), n.amqp_url())).collect() }
    }

    fn index_of(&self, name: &str) -> usize {
        self.urls.iter().position(|(n, _)| n == name).expect("a node")
    }

    /// The first node, from `start` on, that opens an AMQP connection within the timeout
    /// (`None` once `stop` is set); the publisher's failures are noted in `seen`.
    async fn connect_from(
        &self,
        start: &mut usize,
        seen: Option<&Mutex<Seen>>,
        stop: &AtomicBool,
    ) -> Option<(String, Connection)> {
        while !stop.load(Ordering::SeqCst) {
            let (name, url) = self.urls[*start % self.urls.len()].clone();
            *start += 1;
            let tried = Instant::now();
            let connecting = Connection::connect(&url, ConnectionProperties::default());
            let why = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
                Ok(Ok(conn)) => return Some((name, conn)),
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no connection within {CONNECT_TIMEOUT:?}"),
            };
            if let Some(seen) = seen {
                lock(seen).failed_connects.push((name, tried, why));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

async fn close(conn: Connection) {
    let _ = tokio::time::timeout(Duration::from_secs(1), conn.close(200, "bye".into())).await;
}

async fn durable_queue(channel: &Channel) -> lapin::Result<()> {
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(QUEUE.into(), durable, FieldTable::default()).await.map(|_| ())
}

/// Publishes persistent messages with confirms, 10 in flight, entering at node `start` and
/// moving to the next node on any error or timeout, until `stop` (or [`MAX_MESSAGES`]).
async fn publish(nodes: Nodes, mut start: usize, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let mut next = 0usize;
    while !stop.load(Ordering::SeqCst) && next < MAX_MESSAGES {
        let Some((node, conn)) = nodes.connect_from(&mut start, Some(&seen), &stop).await else { break };
        let at = Instant::now();
        lock(&seen).connections.push(Opened { node, at, first_confirm: None, ended: None });
        let ended = publish_on(&conn, &mut next, &seen, &stop).await.err();
        lock(&seen).connections.last_mut().expect("opened").ended = ended;
        close(conn).await;
    }
}

async fn publish_on(
    conn: &Connection,
    next: &mut usize,
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
) -> Result<(), String> {
    let e = |e: lapin::Error| e.to_string();
    let channel = conn.create_channel().await.map_err(e)?;
    channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(e)?;
    durable_queue(&channel).await.map_err(e)?;
    while !stop.load(Ordering::SeqCst) && *next < MAX_MESSAGES {
        let mut batch = Vec::new();
        for _ in 0..10 {
            let body = format!("m{next}");
            *next += 1;
            let persistent = BasicProperties::default().with_delivery_mode(2);
            let options = BasicPublishOptions::default();
            let publishing =
                channel.basic_publish("".into(), QUEUE.into(), options, body.as_bytes(), persistent);
            let pending = publishing.await.map_err(e)?;
            batch.push((body, pending));
        }
        for (body, pending) in batch {
            match tokio::time::timeout(CONFIRM_TIMEOUT, pending).await {
                Ok(Ok(confirmation)) if confirmation.is_ack() => record_confirm(seen, body),
                Ok(Ok(_)) => return Err(format!("nack for {body}")),
                Ok(Err(error)) => return Err(format!("{body}: {error}")),
                Err(_) => return Err(format!("no confirm for {body} within {CONFIRM_TIMEOUT:?}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The client's record, also after a panic elsewhere (the panic is what the test reports).
fn lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn record_confirm(seen: &Mutex<Seen>, body: String) {
    let now = Instant::now();
    let mut seen = lock(seen);
    seen.confirmed.insert(body);
    seen.confirm_times.push(now);
    if let Some(opened) = seen.connections.last_mut() {
        opened.first_confirm.get_or_insert(now);
    }
}

/// Consumes and acks every message, entering at node `start`, moving on after any error or 5 s
/// without a delivery, until `stop`.
async fn consume(nodes: Nodes, mut start: usize, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let Some((_, conn)) = nodes.connect_from(&mut start, None, &stop).await else { break };
        let _ = consume_on(&conn, &seen, &stop).await;
        close(conn).await;
    }
}

async fn consume_on(conn: &Connection, seen: &Mutex<Seen>, stop: &AtomicBool) -> lapin::Result<()> {
    // Every step has a deadline: a consumer stuck on a node that stopped answering moves on,
    // so a message it did not get is one the cluster did not deliver.
    let setup = async {
        let channel = conn.create_channel().await?;
        durable_queue(&channel).await?;
        channel.basic_qos(50, BasicQosOptions::default()).await?;
        channel
            .basic_consume(QUEUE.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
    };
    let Ok(consumer) = tokio::time::timeout(CONSUMER_STEP, setup).await else { return Ok(()) };
    let mut consumer = consumer?;
    while !stop.load(Ordering::SeqCst) {
        let Ok(Some(delivery)) = tokio::time::timeout(CONSUMER_STEP, consumer.next()).await else {
            return Ok(());
        };
        let delivery = delivery?;
        let body = String::from_utf8_lossy(&delivery.data).into_owned();
        lock(seen).deliveries.push((body, delivery.redelivered));
        let Ok(acked) = tokio::time::timeout(CONSUMER_STEP, delivery.ack(BasicAckOptions::default())).await
        else {
            return Ok(());
        };
        acked?;
    }
    Ok(())
}

/// The faults, each made on a cluster whose leader is known.
#[derive(Clone, Copy, Debug)]
enum Fault {
    LeaderFromEtcd,
    LeaderFromFollowers,
    LeaderIsolated,
    FollowerIsolated,
    LeaderFlapping,
    EtcdPaused,
}

/// Who is who when the fault comes: the leader, the follower the publisher enters through, the
/// other follower (the consumer's).
struct Roles {
    leader: String,
    publisher_follower: String,
    consumer_follower: String,
}

/// A running scenario: the network, the cluster in it, and the client's traffic.
struct Scenario<'a> {
    net: &'a Topology,
    cluster: Cluster,
    /// Runs the publisher and the consumer; dropped (ending them) with the scenario.
    _runtime: tokio::runtime::Runtime,
    seen: Arc<Mutex<Seen>>,
    stop_publishing: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    publisher: tokio::task::JoinHandle<()>,
    roles: Roles,
}

impl<'a> Scenario<'a> {
    /// Starts etcd and the nodes in their namespaces, waits until they are in sync, and starts
    /// the publisher (through one follower) and the consumer (through the other). `None` without
    /// etcd.
    fn start(net: &'a Topology) -> Option<Scenario<'a>> {
        let etcd = Etcd::start_at(net.placement("etcd"))?;
        let placements: Vec<_> = NODES.iter().map(|n| net.placement(n)).collect();
        let cluster = Cluster::start_placed(etcd, &placements, &[], &[]);
        let leader = cluster.wait_in_sync(IN_SYNC_WITHIN);
        let mut followers = NODES.iter().filter(|n| **n != leader).map(|n| (*n).to_owned());
        let roles = Roles {
            publisher_follower: followers.next().expect("a follower"),
            consumer_follower: followers.next().expect("two followers"),
            leader,
        };
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop_publishing, stop_consuming) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let nodes = Nodes::of(&cluster);
        let (p, c) = (nodes.index_of(&roles.publisher_follower), nodes.index_of(&roles.consumer_follower));
        let publisher = runtime.spawn(publish(nodes.clone(), p, seen.clone(), stop_publishing.clone()));
        runtime.spawn(consume(nodes, c, seen.clone(), stop_consuming.clone()));
        Some(Scenario {
            net,
            cluster,
            _runtime: runtime,
            seen,
            stop_publishing,
            stop_consuming,
            publisher,
            roles,
        })
    }

    fn confirmed(&self) -> usize {
        lock(&self.seen).confirmed.len()
    }

    /// Waits (bounded) until at least `count` messages more than now are confirmed.
    fn wait_for_more_confirms(&self, count: usize, within: Duration) {
        let target = self.confirmed() + count;
        let deadline = Instant::now() + within;
        while self.confirmed() < target {
            assert!(Instant::now() < deadline, "fewer than {count} more confirms within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Makes `fault`; when the fault began and when it was healed.
    fn make(&self, fault: Fault) -> (Instant, Instant) {
        let Roles { leader, publisher_follower, consumer_follower } = &self.roles;
        let net = self.net;
        let began = Instant::now();
        match fault {
            Fault::LeaderFromEtcd => net.cut(leader, "etcd"),
            Fault::LeaderFromFollowers => {
                net.cut(leader, publisher_follower);
                net.cut(leader, consumer_follower);
            }
            Fault::LeaderIsolated => net.isolate(leader),
            Fault::FollowerIsolated => net.isolate(publisher_follower),
            Fault::LeaderFlapping => return self.flap(leader, began),
            Fault::EtcdPaused => {
                self.cluster.etcd.pause();
                std::thread::sleep(ETCD_PAUSE);
                self.cluster.etcd.resume();
                return (began, Instant::now());
            }
        }
        std::thread::sleep(CUT);
        net.heal_all();
        (began, Instant::now())
    }

    /// Isolates `node` and heals it in turn, every 2 s, for 16 s.
    fn flap(&self, node: &str, began: Instant) -> (Instant, Instant) {
        for _ in 0..4 {
            self.net.isolate(node);
            std::thread::sleep(Duration::from_secs(2));
            self.net.heal_all();
            std::thread::sleep(Duration::from_secs(2));
        }
        (began, Instant::now())
    }

    /// After the heal: the cluster in sync (how long after `healed` that was), confirms again,
    /// then every confirmed message consumed; the publisher and consumer stopped.
    fn settle(&self, healed: Instant) -> Duration {
        self.cluster.wait_in_sync(IN_SYNC_WITHIN);
        let in_sync = healed.elapsed();
        self.wait_for_more_confirms(20, CONFIRMS_AGAIN_WITHIN + CONNECT_TIMEOUT + CONFIRM_TIMEOUT);
        self.stop_publishing.store(true, Ordering::SeqCst);
        // It ends within one connect and one batch's confirms; what it confirmed until then counts.
        let ended = poll_until(CONNECT_TIMEOUT + CONFIRM_TIMEOUT + Duration::from_secs(2), || {
            self.publisher.is_finished()
        });
        assert!(ended, "the publisher did not stop");
        poll_until(CONSUMED_WITHIN, || self.unconsumed().is_empty());
        self.stop_consuming.store(true, Ordering::SeqCst);
        in_sync
    }

    /// Confirmed messages not yet consumed.
    fn unconsumed(&self) -> Vec<String> {
        let seen = lock(&self.seen);
        let consumed: BTreeSet<&String> = seen.deliveries.iter().map(|(body, _)| body).collect();
        seen.confirmed.iter().filter(|b| !consumed.contains(b)).cloned().collect()
    }

    /// Prints the last `count` lines each node logged.
    fn print_node_logs(&self, count: usize) {
        for node in &self.cluster.nodes {
            let log = node.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            eprintln!("--- {}: its last {count} log lines", node.name);
            for line in &log[log.len().saturating_sub(count)..] {
                eprintln!("{line}");
            }
        }
    }

    /// Bodies delivered more than once without the redelivered flag.
    fn duplicates(&self) -> BTreeMap<String, usize> {
        let mut first_deliveries = BTreeMap::<String, usize>::new();
        for (body, redelivered) in &lock(&self.seen).deliveries {
            if !redelivered {
                *first_deliveries.entry(body.clone()).or_default() += 1;
            }
        }
        first_deliveries.into_iter().filter(|(_, n)| *n > 1).collect()
    }
}

impl Drop for Scenario<'_> {
    fn drop(&mut self) {
        self.stop_publishing.store(true, Ordering::SeqCst);
        self.stop_consuming.store(true, Ordering::SeqCst);
    }
}

/// Polls `done` every 50 ms until it holds (`true`) or `within` has passed (`false`).
fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one fault in a fresh topology and checks the outcome (see the module doc). `majority`:
/// whether a majority can confirm during the fault (then confirms must flow within 10 s of it;
/// otherwise within 10 s of the heal).
fn partition_test(fault: Fault, majority: bool, mode: CutMode) {
    let _slot = Slot::take();
    let Some(net) = Topology::create(&["etcd", "n1", "n2", "n3", "client"], mode) else { return };
    net.run_in("client", || {
        let Some(scenario) = Scenario::start(&net) else { return };
        scenario.wait_for_more_confirms(100, IN_SYNC_WITHIN);
        let (began, healed) = scenario.make(fault);
        if !majority {
            poll_until(CONFIRMS_AGAIN_WITHIN, || lock(&scenario.seen).first_confirm_after(healed).is_some());
        }
        report_failover(&scenario, fault, began, healed);
        // From the fault to the heal (or from the heal, where no majority can confirm), with
        // no stretch of more than 10 s without a confirm. Checked last, so that a failing test
        // still shows whether it recovers after the heal.
        let (from, to) = if majority { (began, healed) } else { (healed, healed + CONFIRMS_AGAIN_WITHIN) };
        let gap = lock(&scenario.seen).longest_gap(from, to.min(Instant::now()));
        let stalled = (gap > CONFIRMS_AGAIN_WITHIN || (!majority && lock(&scenario.seen).first_confirm_after(healed).is_none()))
            .then(|| {
                format!(
                    "{fault:?} (leader {}): no confirm for {gap:?}, longer than {CONFIRMS_AGAIN_WITHIN:?} (connections above)",
                    scenario.roles.leader
                )
            });
        let in_sync = scenario.settle(healed);
        let heal_to_confirm = lock(&scenario.seen).first_confirm_after(healed);
        eprintln!("{fault:?}: heal to first confirm {heal_to_confirm:?}, to all in sync {in_sync:?}");
        let lost = scenario.unconsumed();
        let confirmed = scenario.confirmed();
        if !lost.is_empty() {
            // What each node said, for the next person: the test alone cannot tell a consumer
            // that stopped receiving from messages that are gone.
            scenario.print_node_logs(80);
        }
        assert!(lost.is_empty(), "{fault:?}: {} of {confirmed} confirmed lost, e.g. {:?}", lost.len(), &lost[..lost.len().min(5)]);
        let duplicates = scenario.duplicates();
        assert!(duplicates.is_empty(), "{fault:?}: delivered twice, not flagged redelivered: {duplicates:?}");
        let redelivered = lock(&scenario.seen).deliveries.iter().filter(|(_, r)| *r).count();
        eprintln!("{fault:?}: {confirmed} confirmed, none lost, no duplicates ({redelivered} redelivered)");
        assert!(stalled.is_none(), "{}", stalled.unwrap_or_default());
    });
}

/// `at` as a UTC time of day (HH:MM:SS.mmm), to find it in the nodes' logs.
fn utc_time_of(at: Instant) -> String {
    let wall = std::time::SystemTime::now() - at.elapsed();
    let since_epoch = wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (secs, ms) = (since_epoch.as_secs() % 86_400, since_epoch.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Prints fault to first confirm (on any connection, and on a connection opened after the
/// fault), the confirms during the fault and the publisher's connections since.
fn report_failover(scenario: &Scenario, fault: Fault, began: Instant, healed: Instant) {
    let seen = lock(&scenario.seen);
    eprintln!(
        "{fault:?}, {:?} (leader {}, publisher via {}): fault at {} UTC; fault to first confirm {:?}, on a new connection {:?}; \
         {} confirms during the fault of {:?}, the longest stretch without one {:?}",
        scenario.net.mode(),
        scenario.roles.leader,
        scenario.roles.publisher_follower,
        utc_time_of(began),
        seen.first_confirm_after(began),
        seen.first_confirm_on_new_connection(began),
        seen.confirms_between(began, healed),
        healed - began,
        seen.longest_gap(began, healed),
    );
    for line in seen.connections_since(began) {
        eprintln!("{fault:?}:   {line}");
    }
}

#[test]
fn the_leader_cut_from_etcd_only() {
    partition_test(Fault::LeaderFromEtcd, true, CutMode::Blackhole);
}

/// Issue #21, finding 4: the two followers see each other and etcd, so they must take over.
#[test]
fn the_leader_cut_from_its_followers_only() {
    partition_test(Fault::LeaderFromFollowers, true, CutMode::Blackhole);
}

#[test]
fn the_leader_isolated() {
    partition_test(Fault::LeaderIsolated, true, CutMode::Blackhole);
}

#[test]
fn a_follower_isolated() {
    partition_test(Fault::FollowerIsolated, true, CutMode::Blackhole);
}

#[test]
fn the_leaders_links_flapping() {
    partition_test(Fault::LeaderFlapping, true, CutMode::Blackhole);
}

#[test]
fn etcd_paused_for_30_s() {
    partition_test(Fault::EtcdPaused, false, CutMode::Blackhole);
}

/// The leader cut from etcd by a network that loses packets silently: its etcd requests hang
/// until they time out, instead of failing at once.
#[test]
fn the_leader_cut_from_etcd_by_a_silent_network() {
    partition_test(Fault::LeaderFromEtcd, true, CutMode::Drop);
}

/// The leader isolated by a network that loses packets silently: connects to it hang, as
/// behind a dead switch, instead of failing at once.
#[test]
fn the_leader_isolated_by_a_silent_network() {
    partition_test(Fault::LeaderIsolated, true, CutMode::Drop);
}

/// A test run killed before its clean-up (`kill -9`, a CI timeout) leaves its namespaces and the
/// brokers in them behind; the next run removes those whose maker is gone, and no others.
#[test]
fn namespaces_left_by_a_killed_test_run_are_removed_by_the_next() {
    let mut gone = std::process::Command::new("true").spawn().expect("spawn true");
    let gone_pid = gone.id();
    gone.wait().expect("wait for true");
    let stale = format!("hg{gone_pid}x0-br");
    let ours = format!("hg{}x9999-keep", std::process::id());
    let add = |name: &str| std::process::Command::new("ip").args(["netns", "add", name]).status();
    if !add(&stale).is_ok_and(|s| s.success()) {
        assert!(std::env::var_os("HOURGLASS_REQUIRE_NETNS").is_none(), "cannot make a namespace");
        eprintln!("SKIPPED: network namespaces cannot be made here");
        return;
    }
    assert!(add(&ours).is_ok_and(|s| s.success()));
    netns_support::remove_leftovers();
    let listing = std::process::Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let names: Vec<&str> = listing.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let _ = std::process::Command::new("ip").args(["netns", "del", &ours]).status();
    assert!(!names.contains(&stale.as_str()), "{stale} is still there: {names:?}");
    assert!(names.contains(&ours.as_str()), "{ours} of a live test process was removed: {names:?}");
}
