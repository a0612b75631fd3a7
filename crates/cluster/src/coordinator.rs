//! One node's dealings with etcd, on a blocking thread: its lease (kept alive every third of its
//! TTL), its registration, following the leader, campaigning, and — as leader — the in-sync set
//! and the links to the followers. Every election and step-down is logged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::election::{decide, min_in_sync, Decision, InSync, Keys, NodeRecord, Observation};
use crate::etcd::{Etcd, EtcdError};
use crate::in_sync::{InSyncRules, InSyncStep};
use crate::lease::LeaseClock;
use crate::repl::hub::Hub;
use crate::repl::link::{run_link, LinkTarget};
use crate::repl::receiver::Fence;
use crate::retry::{pause_unless_stopped, Backoff, OutageLog};

/// How often a node looks at etcd (and so how soon after a lease expires a follower campaigns).
const POLL: Duration = Duration::from_millis(150);
/// Each etcd request gives up after this long (then the next endpoint is tried).
const ETCD_TIMEOUT: Duration = Duration::from_millis(1500);

/// What a clustered node is told at start.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub etcd_endpoints: Vec<String>,
    pub cluster_name: String,
    pub node: NodeRecord,
    pub lease_ttl_secs: u64,
    pub min_in_sync: Option<usize>,
    pub data_dir: PathBuf,
    /// Mutual TLS on the replication port (`--replication-tls`).
    pub replication_tls: Option<crate::repl::ReplicationTls>,
    /// The cluster secret replication connections prove themselves with
    /// (`--cluster-secret-file`); at least one of it and `replication_tls` is set.
    pub cluster_secret: Option<crate::repl::ClusterSecret>,
    /// TLS to etcd (`--etcd-cacert`, `--etcd-cert`, `--etcd-key`).
    pub etcd_tls: Option<crate::etcd::EtcdTls>,
    /// This node does not campaign before then: it has just stepped down (and restarted), and
    /// another node should get the first chance to lead.
    pub campaign_not_before: Option<Instant>,
}

/// What a node won: its term, and the in-sync set etcd recorded when it won (itself left out;
/// `None`: a new cluster, no set yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elected {
    pub term: u64,
    pub recorded: Option<BTreeSet<String>>,
}

/// What the node is now, for the proxies and the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Follower { leader: Option<NodeRecord>, term: u64 },
    Leader { term: u64 },
}

/// Why a leader stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum StepDown {
    #[error("its lease expired (paused or cut off from etcd)")]
    LeaseLost,
    #[error("etcd has another leader (term {0})")]
    Superseded(i64),
    #[error("etcd unreachable for longer than the lease: {0}")]
    EtcdLost(EtcdError),
    #[error("too few followers reachable to confirm, while {} may lead instead", .0.join(", "))]
    CutOff(Vec<String>),
    #[error("the node is shutting down")]
    Stopped,
}

pub struct Coordinator {
    settings: ClusterSettings,
    etcd: Etcd,
    keys: Keys,
    lease: Mutex<Lease>,
    pub fence: Arc<Fence>,
    role: tokio::sync::watch::Sender<Role>,
    view: Mutex<View>,
}

struct Lease {
    id: i64,
    clock: LeaseClock,
}

/// The last look at the cluster, for `/api/cluster`.
#[derive(Default)]
struct View {
    nodes: Vec<NodeRecord>,
    seen: BTreeMap<String, Instant>,
    hub: Option<Arc<Hub>>,
    in_sync: Vec<String>,
}

impl Coordinator {
    /// Registers this node in etcd (a lease, its record, its membership).
    pub fn join(settings: ClusterSettings) -> Result<Arc<Coordinator>, EtcdError> {
        let etcd = Etcd::new(settings.etcd_endpoints.clone(), ETCD_TIMEOUT, settings.etcd_tls.as_ref())?;
        let keys = Keys::new(&settings.cluster_name);
        let sent = Instant::now();
        let id = etcd.grant_lease(settings.lease_ttl_secs)?;
        let clock = LeaseClock::granted(Duration::from_secs(settings.lease_ttl_secs), sent);
        let record = serde_json::to_vec(&settings.node).unwrap_or_default();
        etcd.put(&keys.node(&settings.node.name), &record, id)?;
        etcd.put(&keys.member(&settings.node.name), &record, 0)?;
        let (role, _) = tokio::sync::watch::channel(Role::Follower { leader: None, term: 0 });
        tracing::info!(node = %settings.node.name, cluster = %settings.cluster_name, "joined the cluster");
        Ok(Arc::new(Coordinator {
            settings,
            etcd,
            keys,
            lease: Mutex::new(Lease { id, clock }),
            fence: Arc::new(Fence::default()),
            role,
            view: Mutex::new(View::default()),
        }))
    }

    /// [`Coordinator::join`], tried again with back-off for as long as etcd does not answer
    /// (a node never gives up on etcd: issue #21), logging at most every 10 s. `Ok(None)` once
    /// `stop` is set; an error only for a setting that retrying cannot fix (TLS).
    pub fn join_retrying(
        settings: ClusterSettings,
        stop: &AtomicBool,
    ) -> Result<Option<Arc<Coordinator>>, EtcdError> {
        let (mut backoff, mut outage) = (Backoff::default(), OutageLog::default());
        while !stop.load(Ordering::SeqCst) {
            match Coordinator::join(settings.clone()) {
                Ok(coordinator) => {
                    if let Some(line) = outage.on_success(Instant::now()) {
                        line.write("joining the cluster", None);
                    }
                    return Ok(Some(coordinator));
                }
                Err(error) if error.is_transient() => {
                    if let Some(line) = outage.on_failure(Instant::now()) {
                        line.write("joining the cluster", Some(&error));
                    }
                    pause_unless_stopped(stop, backoff.next_delay());
                }
                Err(error) => return Err(error),
            }
        }
        Ok(None)
    }

    pub fn roles(&self) -> tokio::sync::watch::Receiver<Role> {
        self.role.subscribe()
    }

    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// Renews the lease when a third of its TTL has passed, and says until when it holds. A
    /// follower whose lease expired (it was paused) takes a new one and registers again. For a
    /// leader, the lease is over once [`LeaseClock::holds`] says so, whether or not etcd answers:
    /// a step-down.
    fn keep_lease(&self, leading: bool) -> Result<Instant, StepDown> {
        let mut lease = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        let ttl = Duration::from_secs(self.settings.lease_ttl_secs);
        let sent = Instant::now();
        if lease.clock.renewal_due(sent) {
            match self.etcd.keep_alive(lease.id) {
                Ok(left) if left > 0 => lease.clock.renewed(sent, Duration::from_secs(left as u64)),
                Ok(_) if leading => return Err(StepDown::LeaseLost),
                Ok(_) => {
                    let record = serde_json::to_vec(&self.settings.node).unwrap_or_default();
                    if let Ok(id) = self.etcd.grant_lease(self.settings.lease_ttl_secs) {
                        if self.etcd.put(&self.keys.node(&self.settings.node.name), &record, id).is_ok() {
                            *lease = Lease { id, clock: LeaseClock::granted(ttl, sent) };
                            tracing::info!(
                                "lease had expired (this node was paused or cut off): registered again"
                            );
                        }
                    }
                }
                Err(error) if leading && !lease.clock.holds(Instant::now()) => {
                    return Err(StepDown::EtcdLost(error))
                }
                Err(error) => tracing::debug!(%error, "lease renewal failed; retrying"),
            }
        }
        if leading && !lease.clock.holds(Instant::now()) {
            return Err(StepDown::LeaseLost);
        }
        Ok(lease.clock.valid_until())
    }

    fn observe(&self) -> Result<Observation, EtcdError> {
        let (leader, leader_lease) = match self.etcd.get(&self.keys.leader())? {
            Some(kv) => (
                serde_json::from_slice::<NodeRecord>(&kv.value).ok().map(|n| (n, kv.create_revision as u64)),
                kv.lease,
            ),
            None => (None, 0),
        };
        let in_sync = match self.etcd.get(&self.keys.in_sync())? {
            Some(kv) => serde_json::from_slice::<InSync>(&kv.value).ok().map(|s| (s, kv.mod_revision)),
            None => None,
        };
        Ok(Observation { leader, leader_lease, in_sync })
    }

    /// Follows the leaders etcd names until this node wins an election; its term and the set it
    /// won against. `None` when `stop` was set.
    pub fn follow_until_elected(&self, stop: &AtomicBool) -> Option<Elected> {
        let mut last_leader: Option<(String, u64)> = None;
        let (mut backoff, mut outage) = (Backoff::default(), OutageLog::default());
        while !stop.load(Ordering::SeqCst) {
            let _ = self.keep_lease(false);
            let seen = match self.observe() {
                Ok(seen) => {
                    if let Some(line) = outage.on_success(Instant::now()) {
                        line.write("following", None);
                    }
                    backoff.reset();
                    seen
                }
                Err(error) => {
                    // The role stays as it was: a leader this node forwarded to may still serve
                    // (its own lease decides that), and the next look at etcd corrects it.
                    if let Some(line) = outage.on_failure(Instant::now()) {
                        line.write("following", Some(&error));
                    }
                    pause_unless_stopped(stop, backoff.next_delay());
                    continue;
                }
            };
            self.refresh_view(&seen);
            let my_lease = self.lease.lock().unwrap_or_else(|p| p.into_inner()).id;
            match decide(&self.settings.node.name, my_lease, &seen) {
                Decision::Follow(leader, term) => {
                    // Fencing: from now on only this leader's stream is applied here.
                    self.fence.leader_seen(&leader.name, term);
                    if last_leader.as_ref() != Some(&(leader.name.clone(), term)) {
                        tracing::info!(leader = %leader.name, term, "following the leader");
                        last_leader = Some((leader.name.clone(), term));
                    }
                    self.role.send_if_modified(|role| {
                        let new = Role::Follower { leader: Some(leader.clone()), term };
                        std::mem::replace(role, new.clone()) != new
                    });
                }
                Decision::Campaign { .. }
                    if self.settings.campaign_not_before.is_some_and(|at| Instant::now() < at) => {}
                Decision::Campaign { in_sync_revision } => {
                    if let Some(term) = self.campaign(in_sync_revision) {
                        return Some(self.elected(term, &seen));
                    }
                }
                Decision::Lead(term) => {
                    self.fence.admit(term);
                    tracing::info!(node = %self.settings.node.name, term, "elected leader (the campaign's answer was lost)");
                    return Some(self.elected(term, &seen));
                }
                Decision::Wait => {
                    self.role.send_if_modified(|role| {
                        let new = Role::Follower { leader: None, term: 0 };
                        std::mem::replace(role, new.clone()) != new
                    });
                }
            }
            pause_unless_stopped(stop, POLL);
        }
        None
    }

    /// What this node won at `term`, with the in-sync set `seen` before it campaigned (nobody
    /// but the leader of `term` can have changed it since).
    fn elected(&self, term: u64, seen: &Observation) -> Elected {
        let me = &self.settings.node.name;
        let recorded =
            seen.in_sync.as_ref().map(|(set, _)| set.nodes.iter().filter(|n| *n != me).cloned().collect());
        Elected { term, recorded }
    }

    fn campaign(&self, in_sync_revision: i64) -> Option<u64> {
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner()).id;
        let record = serde_json::to_vec(&self.settings.node).unwrap_or_default();
        let won = self.etcd.create_if_absent_and_unchanged(
            &self.keys.leader(),
            &record,
            lease,
            &self.keys.in_sync(),
            in_sync_revision,
        );
        match won {
            Ok(Some(term)) => {
                let term = term as u64;
                self.fence.admit(term);
                tracing::info!(node = %self.settings.node.name, term, "elected leader");
                Some(term)
            }
            Ok(None) => None,
            Err(error) => {
                tracing::debug!(%error, "campaign failed");
                None
            }
        }
    }

    /// How many nodes must hold a record now (`--min-in-sync`, or a majority of the members
    /// etcd lists; an unreadable etcd holds every confirm).
    pub fn min_in_sync_now(&self) -> usize {
        let members = self.etcd.get_prefix(&self.keys.members()).map(|m| m.len()).unwrap_or(usize::MAX / 2);
        min_in_sync(members, self.settings.min_in_sync)
    }

    /// Leads at `term` until this node must step down: keeps its lease (and tells the hub until
    /// when it holds), keeps a link to every other node, and keeps etcd's in-sync set in step
    /// with the hub by the rules of [`InSyncRules`]. `recorded` is the set it was elected against.
    pub fn lead(&self, hub: Arc<Hub>, elected: &Elected, stop: &AtomicBool) -> StepDown {
        let term = elected.term;
        // send_replace: the value changes even when nobody watches (the proxies are gone now).
        self.role.send_replace(Role::Leader { term });
        self.view.lock().unwrap_or_else(|p| p.into_inner()).hub = Some(hub.clone());
        let me = self.settings.node.name.clone();
        let lag_timeout = Duration::from_secs(self.settings.lease_ttl_secs);
        let inherited = elected.recorded.clone().map(|mut set| {
            set.insert(me.clone());
            set
        });
        let mut rules = InSyncRules::new(
            &me,
            inherited,
            hub.min_in_sync(),
            lag_timeout / 3,
            Instant::now() + lag_timeout,
        );
        let mut links: BTreeMap<String, Arc<AtomicBool>> = BTreeMap::new();
        let step_down = loop {
            if stop.load(Ordering::SeqCst) {
                break StepDown::Stopped;
            }
            match self.keep_lease(true) {
                Ok(until) => {
                    hub.set_lease_until(until);
                    self.etcd.give_up_at(Some(until));
                }
                Err(why) => break why,
            }
            match self.etcd.get(&self.keys.leader()) {
                Ok(Some(kv)) if kv.create_revision as u64 == term => {}
                Ok(Some(kv)) => break StepDown::Superseded(kv.create_revision),
                Ok(None) => break StepDown::LeaseLost,
                Err(_) => {}
            }
            if let Ok(members) = self.etcd.get_prefix(&self.keys.members()) {
                self.start_links(&hub, term, &members, &mut links);
                let min = min_in_sync(members.len(), self.settings.min_in_sync);
                hub.set_min_in_sync(min);
                rules.set_min_in_sync(min);
            }
            let Ok(alive) = self.alive_nodes() else {
                std::thread::sleep(POLL);
                continue;
            };
            if let Err(why) = self.maintain_in_sync(&hub, term, &mut rules, &alive, lag_timeout) {
                break why;
            }
            std::thread::sleep(POLL);
        };
        hub.depose();
        self.etcd.give_up_at(None);
        for stop in links.values() {
            stop.store(true, Ordering::SeqCst);
        }
        tracing::warn!(node = %me, term, reason = %step_down, "stepping down as leader");
        if matches!(step_down, StepDown::CutOff(_)) {
            // The term is given up at once, not after the lease: a node on the other side of
            // the cut campaigns now (this one holds off: `campaign_not_before`).
            if let Err(error) = self.etcd.delete_if_created_at(&self.keys.leader(), term as i64) {
                tracing::warn!(%error, "could not give up the leader key; it expires with the lease");
            }
        }
        step_down
    }

    /// The names of the nodes whose lease etcd holds.
    fn alive_nodes(&self) -> Result<BTreeSet<String>, EtcdError> {
        Ok(self.live_nodes()?.into_iter().map(|node| node.name).collect())
    }

    /// The records of the nodes whose lease etcd holds.
    fn live_nodes(&self) -> Result<Vec<NodeRecord>, EtcdError> {
        let nodes = self.etcd.get_prefix(&self.keys.nodes())?;
        Ok(nodes.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect())
    }

    fn start_links(
        &self,
        hub: &Arc<Hub>,
        term: u64,
        members: &[crate::etcd::KeyValue],
        links: &mut BTreeMap<String, Arc<AtomicBool>>,
    ) {
        for kv in members {
            let Ok(node) = serde_json::from_slice::<NodeRecord>(&kv.value) else { continue };
            if node.name == self.settings.node.name || links.contains_key(&node.name) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            links.insert(node.name.clone(), stop.clone());
            let target = LinkTarget {
                follower: node.name.clone(),
                address: node.replication(),
                host: node.host.clone(),
                tls: self.settings.replication_tls.clone(),
                secret: self.settings.cluster_secret.clone(),
                leader: self.settings.node.name.clone(),
                term,
                data_dir: self.settings.data_dir.clone(),
            };
            let hub = hub.clone();
            let _ = std::thread::Builder::new()
                .name(format!("hg-repl-{}", node.name))
                .spawn(move || run_link(hub, target, stop));
        }
    }

    /// One look at the in-sync set: admits caught-up followers (hub first), then does what the
    /// rules say — record a new set in etcd (then drop the removed ones from the hub), hold, or
    /// step down.
    fn maintain_in_sync(
        &self,
        hub: &Hub,
        term: u64,
        rules: &mut InSyncRules,
        alive: &BTreeSet<String>,
        lag_timeout: Duration,
    ) -> Result<(), StepDown> {
        let now = Instant::now();
        let admitted = hub.admit_caught_up(now, lag_timeout);
        let (set, removed) = match rules.next(now, &hub.replicas(now, lag_timeout), alive) {
            InSyncStep::Keep => return Ok(()),
            InSyncStep::StepDown { unreachable } => return Err(StepDown::CutOff(unreachable)),
            InSyncStep::Record { set, removed } => (set, removed),
        };
        let value = serde_json::to_vec(&InSync { term, nodes: set.clone() }).unwrap_or_default();
        match self.etcd.put_if_created_at(&self.keys.leader(), term as i64, &self.keys.in_sync(), &value) {
            Ok(true) => {
                rules.recorded(&set);
                hub.set_recorded(set.iter().skip(1).cloned().collect());
                hub.remove_in_sync(&removed);
                for name in &removed {
                    tracing::warn!(follower = %name, "follower out of sync: removed from the in-sync set");
                }
                for name in &admitted {
                    tracing::info!(follower = %name, "follower in sync");
                }
                self.view.lock().unwrap_or_else(|p| p.into_inner()).in_sync = set;
                Ok(())
            }
            Ok(false) => Err(StepDown::Superseded(0)),
            Err(error) => {
                tracing::debug!(%error, "cannot write the in-sync set");
                Ok(())
            }
        }
    }

    fn refresh_view(&self, seen: &Observation) {
        let mut view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((set, _)) = &seen.in_sync {
            view.in_sync = set.nodes.clone();
        }
        drop(view);
        self.refresh_live_nodes();
    }

    /// Reads the live nodes (those whose lease holds) from etcd into the view.
    fn refresh_live_nodes(&self) {
        let Ok(nodes) = self.live_nodes() else { return };
        let mut view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        view.nodes = nodes;
        for node in view.nodes.clone() {
            view.seen.insert(node.name, now);
        }
    }

    /// The Prometheus gauges' values: the role, term, in-sync set and each follower's lag as
    /// this node last saw them (no etcd round trip).
    pub fn gauges(&self) -> (bool, u64, u64, Vec<(String, u64)>) {
        let role = self.role.borrow().clone();
        let view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let lags = view
            .hub
            .as_ref()
            .map(|hub| hub.status().into_iter().map(|f| (f.name, f.lag_records)).collect())
            .unwrap_or_default();
        match role {
            Role::Leader { term } => (true, term, view.in_sync.len() as u64, lags),
            Role::Follower { term, .. } => (false, term, view.in_sync.len() as u64, lags),
        }
    }

    /// `GET /api/cluster`'s answer.
    pub fn status_json(&self) -> Value {
        self.refresh_live_nodes();
        let members = self.etcd.get_prefix(&self.keys.members()).unwrap_or_default();
        let view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let role = self.role.borrow().clone();
        let me = &self.settings.node.name;
        let (leader, term) = match &role {
            Role::Leader { term } => (Some(me.clone()), *term),
            Role::Follower { leader, term } => (leader.as_ref().map(|l| l.name.clone()), *term),
        };
        let followers = view.hub.as_ref().map(|hub| hub.status()).unwrap_or_default();
        let now = Instant::now();
        let nodes: Vec<Value> = members
            .iter()
            .filter_map(|kv| serde_json::from_slice::<NodeRecord>(&kv.value).ok())
            .map(|node| {
                let is_leader = leader.as_deref() == Some(node.name.as_str());
                let live = view.nodes.iter().any(|n| n.name == node.name);
                let follower = followers.iter().find(|f| f.name == node.name);
                json!({
                    "name": node.name,
                    "role": if is_leader { "leader" } else { "follower" },
                    "running": live,
                    "in_sync": view.in_sync.contains(&node.name),
                    "lag_records": if is_leader { 0 } else { follower.map(|f| f.lag_records).unwrap_or(0) },
                    "amqp": node.amqp(),
                    "last_seen_ms": view.seen.get(&node.name).map(|at| now.duration_since(*at).as_millis() as u64),
                })
            })
            .collect();
        json!({ "cluster_name": self.settings.cluster_name, "leader": leader, "term": term, "nodes": nodes })
    }

    /// Leaves etcd at shutdown: revoking the lease removes the node's record (and the leader
    /// key, if it leads) at once, instead of after the TTL.
    pub fn leave(&self) -> Result<(), EtcdError> {
        let id = self.lease.lock().unwrap_or_else(|p| p.into_inner()).id;
        self.etcd.revoke(id)
    }
}
