//! One node's dealings with etcd, on a blocking thread: the I/O around two state machines that
//! hold every rule and no I/O ([`Following`]: the lease, following, campaigning; [`Leading`]:
//! the lease window, the term, the in-sync set, stepping down). This module performs their
//! etcd [`Request`]s through an [`EtcdPort`], applies their effects to the hub, the fence, the
//! role and the status view, and logs every election and step-down. The simulation
//! (`tests/simulation`) drives the same two machines against a model etcd.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::dead_leader;
use crate::election::{min_in_sync, Keys, NodeRecord};
use crate::etcd::{Etcd, EtcdError};
use crate::in_sync::Replicas;
use crate::lease::{HeldLease, LeaseClock};
use crate::repl::hub::{FollowerStatus, Hub};
use crate::repl::link::{run_link, LinkTarget};
use crate::repl::receiver::Fence;
use crate::retry::{pause_unless_stopped, random_seed, Backoff, OutageLog};

mod following;
mod leading;
mod requests;

pub use following::{FollowEffect, FollowNext, FollowStep, Following};
pub use leading::{Followers, LeadEffect, LeadNext, LeadStep, Leading};
pub use requests::{EtcdPort, EtcdRequests, Reply, Request, Seen};

/// How often a node looks at etcd (and so how soon after a lease expires a follower campaigns).
pub const POLL: Duration = Duration::from_millis(150);
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

/// What a state machine says after one input: effects for the driver to apply, in order, then
/// what to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<Effect, Next> {
    pub effects: Vec<Effect>,
    pub next: Next,
}

impl<Effect, Next> Step<Effect, Next> {
    /// Only what to do next, no effects.
    fn next(next: Next) -> Self {
        Step { effects: Vec::new(), next }
    }
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
    /// The lease as the state machine running now last held it (for `leave`, and to hand it
    /// from the follower's machine to the leader's).
    lease: Mutex<HeldLease>,
    pub fence: Arc<Fence>,
    role: tokio::sync::watch::Sender<Role>,
    view: Mutex<View>,
}

/// The last look at the cluster, for `/api/cluster` and the gauges.
#[derive(Default)]
struct View {
    nodes: Vec<NodeRecord>,
    members: Vec<NodeRecord>,
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
        let requests = EtcdRequests {
            etcd: &etcd,
            keys: &keys,
            node: &settings.node,
            lease_ttl_secs: settings.lease_ttl_secs,
        };
        let Reply::Registered { lease: id } = requests.perform(&Request::Register)? else {
            unreachable!("a registration is answered with its lease")
        };
        let clock = LeaseClock::granted(Duration::from_secs(settings.lease_ttl_secs), sent);
        let (role, _) = tokio::sync::watch::channel(Role::Follower { leader: None, term: 0 });
        tracing::info!(node = %settings.node.name, cluster = %settings.cluster_name, "joined the cluster");
        Ok(Arc::new(Coordinator {
            settings,
            etcd,
            keys,
            lease: Mutex::new(HeldLease { id, clock }),
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

    fn requests(&self) -> EtcdRequests<'_> {
        EtcdRequests {
            etcd: &self.etcd,
            keys: &self.keys,
            node: &self.settings.node,
            lease_ttl_secs: self.settings.lease_ttl_secs,
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.settings.lease_ttl_secs)
    }

    /// Follows the leaders etcd names until this node wins an election; its term and the set it
    /// won against. `None` when `stop` was set.
    pub fn follow_until_elected(&self, stop: &AtomicBool) -> Option<Elected> {
        let lease = *self.lease.lock().unwrap_or_else(|p| p.into_inner());
        let me = &self.settings.node.name;
        let mut machine =
            Following::new(me, self.ttl(), lease, self.settings.campaign_not_before, random_seed());
        let (etcd, mut outage) = (self.requests(), OutageLog::default());
        let mut step = machine.wake(Instant::now());
        while !stop.load(Ordering::SeqCst) {
            for effect in std::mem::take(&mut step.effects) {
                self.apply_follow_effect(effect);
            }
            step = match step.next {
                FollowNext::Ask(request) => {
                    let reply = etcd.perform(&request);
                    if request == Request::Observe {
                        note_outage(&mut outage, "following", &reply);
                    }
                    let step = machine.answered(Instant::now(), reply);
                    *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = machine.lease();
                    step
                }
                FollowNext::Sleep(pause) => {
                    pause_unless_stopped(stop, pause);
                    let gone =
                        self.dead_leader().and_then(|(leader, term)| machine.leader_gone(&leader, term));
                    gone.unwrap_or_else(|| machine.wake(Instant::now()))
                }
                FollowNext::Elected(elected) => return Some(elected),
            };
        }
        None
    }

    /// The leader this node follows, with its term, if its stream to this node ended and its
    /// client port now refuses connections (`dead_leader.rs`): its process is gone.
    fn dead_leader(&self) -> Option<(String, u64)> {
        let (leader, term) = self.fence.take_ended_stream()?;
        let record = match &*self.role.borrow() {
            Role::Follower { leader: Some(record), term: followed }
                if record.name == leader && *followed == term =>
            {
                record.clone()
            }
            _ => return None,
        };
        let ports = [
            Some(record.amqp()),
            Some(record.http()),
            record.amqps(),
            record.https(),
            record.sqs(),
            record.sqs_tls(),
        ];
        let addresses: Vec<String> = ports.into_iter().flatten().filter(|a| !a.ends_with(":0")).collect();
        if !dead_leader::refuses_connections(&addresses) {
            tracing::info!(%leader, term, "the leader's stream ended, but it is still there");
            return None;
        }
        Some((leader, term))
    }

    fn apply_follow_effect(&self, effect: FollowEffect) {
        match effect {
            FollowEffect::Seen(seen) => self.refresh_view(&seen),
            FollowEffect::Follow { leader, term, changed } => {
                // Fencing: from now on only this leader's stream is applied here.
                self.fence.leader_seen(&leader.name, term);
                if changed {
                    tracing::info!(leader = %leader.name, term, "following the leader");
                }
                self.role.send_if_modified(|role| {
                    let new = Role::Follower { leader: Some(leader.clone()), term };
                    std::mem::replace(role, new.clone()) != new
                });
            }
            FollowEffect::NoLeader => {
                self.role.send_if_modified(|role| {
                    let new = Role::Follower { leader: None, term: 0 };
                    std::mem::replace(role, new.clone()) != new
                });
            }
            FollowEffect::Registered { .. } => {
                tracing::info!("lease had expired (this node was paused or cut off): registered again")
            }
            FollowEffect::Deposed { leader, term, deposed } => match deposed {
                true => tracing::warn!(
                    %leader, term,
                    "the leader's stream ended and its port refuses connections: deposed it without waiting for its lease"
                ),
                false => tracing::info!(%leader, term, "the dead leader's key was gone already"),
            },
            FollowEffect::Won { term, answer_lost } => {
                self.fence.admit(term);
                match answer_lost {
                    false => tracing::info!(node = %self.settings.node.name, term, "elected leader"),
                    true => tracing::info!(
                        node = %self.settings.node.name, term,
                        "elected leader (the campaign's answer was lost)"
                    ),
                }
            }
        }
    }

    /// How many nodes must hold a record now (`--min-in-sync`, or a majority of the members
    /// etcd lists; an unreadable etcd holds every confirm).
    pub fn min_in_sync_now(&self) -> usize {
        let members = self.etcd.get_prefix(&self.keys.members()).map(|m| m.len()).unwrap_or(usize::MAX / 2);
        min_in_sync(members, self.settings.min_in_sync)
    }

    /// Leads at `term` until this node must step down, doing what [`Leading`] says: keeps its
    /// lease (and tells the hub until when it holds), keeps a link to every other node, and
    /// keeps etcd's in-sync set in step with the hub.
    pub fn lead(&self, hub: Arc<Hub>, elected: &Elected, stop: &AtomicBool) -> StepDown {
        let term = elected.term;
        // send_replace: the value changes even when nobody watches (the proxies are gone now).
        self.role.send_replace(Role::Leader { term });
        self.view.lock().unwrap_or_else(|p| p.into_inner()).hub = Some(hub.clone());
        let me = self.settings.node.name.clone();
        let lease = *self.lease.lock().unwrap_or_else(|p| p.into_inner());
        let mut machine = Leading::new(
            &me,
            elected,
            lease,
            self.ttl(),
            hub.min_in_sync(),
            self.settings.min_in_sync,
            Instant::now(),
        );
        let etcd = self.requests();
        let mut links: BTreeMap<String, Arc<AtomicBool>> = BTreeMap::new();
        let mut step = machine.wake(Instant::now());
        let step_down = loop {
            if stop.load(Ordering::SeqCst) {
                break StepDown::Stopped;
            }
            for effect in std::mem::take(&mut step.effects) {
                self.apply_lead_effect(effect, &hub, term, &mut links);
            }
            step = match step.next {
                LeadNext::Ask(request) => {
                    let reply = etcd.perform(&request);
                    let step = machine.answered(Instant::now(), reply, &mut HubFollowers(&hub));
                    *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = machine.lease();
                    step
                }
                LeadNext::Sleep(pause) => {
                    std::thread::sleep(pause);
                    machine.wake(Instant::now())
                }
                LeadNext::SteppedDown(why) => break why,
            };
        };
        hub.depose();
        self.etcd.give_up_at(None);
        for stop in links.values() {
            stop.store(true, Ordering::SeqCst);
        }
        tracing::warn!(node = %me, term, reason = %step_down, "stepping down as leader");
        step_down
    }

    fn apply_lead_effect(
        &self,
        effect: LeadEffect,
        hub: &Arc<Hub>,
        term: u64,
        links: &mut BTreeMap<String, Arc<AtomicBool>>,
    ) {
        match effect {
            LeadEffect::LeaseUntil(until) => {
                hub.set_lease_until(until);
                self.etcd.give_up_at(Some(until));
            }
            LeadEffect::MinInSync(min) => hub.set_min_in_sync(min),
            LeadEffect::Link(node) => self.start_link(hub, term, node, links),
            LeadEffect::Seen(seen) => self.refresh_view(&seen),
            LeadEffect::Recorded { nodes, removed, admitted } => {
                hub.set_recorded(nodes.iter().skip(1).cloned().collect());
                hub.remove_in_sync(&removed);
                for name in &removed {
                    tracing::warn!(follower = %name, "follower out of sync: removed from the in-sync set");
                }
                for name in &admitted {
                    tracing::info!(follower = %name, "follower in sync");
                }
                self.view.lock().unwrap_or_else(|p| p.into_inner()).in_sync = nodes;
            }
            LeadEffect::Admitted(admitted) => {
                for name in &admitted {
                    tracing::info!(follower = %name, "follower in sync");
                }
            }
            LeadEffect::Deposed => hub.depose(),
        }
    }

    fn start_link(
        &self,
        hub: &Arc<Hub>,
        term: u64,
        node: NodeRecord,
        links: &mut BTreeMap<String, Arc<AtomicBool>>,
    ) {
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

    /// Takes one look at the cluster into the view: the recorded set, the live nodes (and when
    /// each was last seen alive) and the members.
    fn refresh_view(&self, seen: &Seen) {
        let mut view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((set, _)) = &seen.observation.in_sync {
            view.in_sync = set.nodes.clone();
        }
        let now = Instant::now();
        for node in &seen.live {
            view.seen.insert(node.name.clone(), now);
        }
        view.nodes = seen.live.clone();
        view.members = seen.members.clone();
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

    /// `GET /api/cluster`'s answer, from the last look at etcd (at most a poll old: no etcd
    /// round trip per request).
    pub fn status_json(&self) -> Value {
        let view = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let role = self.role.borrow().clone();
        let me = &self.settings.node.name;
        let (leader, term) = match &role {
            Role::Leader { term } => (Some(me.clone()), *term),
            Role::Follower { leader, term } => (leader.as_ref().map(|l| l.name.clone()), *term),
        };
        // Read under the view's lock: the Recorded effect updates the view before the leader's
        // next round can admit anyone, so a follower shown caught up and in sync is in the set
        // etcd holds (see `member_status`).
        let followers = view.hub.as_ref().map(|hub| hub.status()).unwrap_or_default();
        let now = Instant::now();
        let nodes: Vec<Value> = view
            .members
            .iter()
            .map(|node| member_status(node, leader.as_deref(), &view, &followers, now))
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

/// One member's entry in `/api/cluster`. `in_sync`: etcd's recorded set names it, so it may
/// campaign. `caught_up`: it leads, or this leader's hub holds it in its set, so every confirm
/// waits for it and the recorded set keeps it while it stays reachable. A new leader inherits
/// the recorded set: a follower of it is `in_sync` before it has caught up with this leader, and
/// leaves the set if another follower catches up first; `lag_records` is 0 meanwhile (nothing
/// sequenced yet). Only both together say that it stays eligible.
fn member_status(
    node: &NodeRecord,
    leader: Option<&str>,
    view: &View,
    followers: &[FollowerStatus],
    now: Instant,
) -> Value {
    let is_leader = leader == Some(node.name.as_str());
    let follower = followers.iter().find(|f| f.name == node.name);
    json!({
        "name": node.name,
        "role": if is_leader { "leader" } else { "follower" },
        "running": view.nodes.iter().any(|n| n.name == node.name),
        "in_sync": view.in_sync.contains(&node.name),
        "caught_up": is_leader || follower.is_some_and(|f| f.in_sync),
        "lag_records": if is_leader { 0 } else { follower.map(|f| f.lag_records).unwrap_or(0) },
        "amqp": node.amqp(),
        "last_seen_ms": view.seen.get(&node.name).map(|at| now.duration_since(*at).as_millis() as u64),
    })
}

/// The hub as the leader's state machine sees it.
struct HubFollowers<'a>(&'a Hub);

impl Followers for HubFollowers<'_> {
    fn admit_caught_up(&mut self, now: Instant, lag_timeout: Duration) -> Vec<String> {
        self.0.admit_caught_up(now, lag_timeout)
    }

    fn replicas(&self, now: Instant, lag_timeout: Duration) -> Replicas {
        self.0.replicas(now, lag_timeout)
    }
}

/// Logs an etcd outage while following: at once, then at most every 10 s, and once it ends.
fn note_outage(outage: &mut OutageLog, doing: &str, reply: &Result<Reply, EtcdError>) {
    let line = match reply {
        Ok(_) => outage.on_success(Instant::now()),
        Err(_) => outage.on_failure(Instant::now()),
    };
    if let Some(line) = line {
        line.write(doing, reply.as_ref().err().map(|e| e as &dyn std::fmt::Display));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_follower_a_new_leader_inherited_is_in_sync_but_not_caught_up_until_its_hub_admits_it() {
        // The flaky tests/cluster_catalog_damage.rs: the view named the damaged node in sync from
        // the inherited set, with lag 0, before it had caught up; the other follower caught up
        // first, the set etcd records left it out, and once the others were killed it could
        // not campaign. `caught_up` is what says the recorded set keeps it.
        let members = vec![NodeRecord::named("a"), NodeRecord::named("b"), NodeRecord::named("c")];
        let view = View { members: members.clone(), in_sync: names(&["a", "b", "c"]), ..View::default() };
        let status = |followers: &[FollowerStatus], node: usize| {
            let entry = member_status(&members[node], Some("a"), &view, followers, Instant::now());
            (entry["in_sync"] == true, entry["caught_up"] == true, entry["lag_records"].as_u64())
        };
        let catching_up = [FollowerStatus { name: "b".into(), lag_records: 0, in_sync: false }];
        assert_eq!(status(&catching_up, 1), (true, false, Some(0)), "inherited, catching up");
        assert_eq!(status(&catching_up, 2), (true, false, Some(0)), "inherited, not linked yet");
        let admitted = [FollowerStatus { name: "b".into(), lag_records: 0, in_sync: true }];
        assert_eq!(status(&admitted, 1), (true, true, Some(0)));
        assert_eq!(status(&admitted, 0), (true, true, Some(0)), "the leader");
    }
}
