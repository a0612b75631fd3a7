//! Three nodes running the coordinator's rules (the crate's sans-IO `election`, `lease` and
//! `in_sync` modules) in the order the coordinator's loops run them, against the model etcd and
//! a replication model, driven by one seeded event queue. Each node's clock runs at its own rate.
//! The two invariants are checked as the run goes:
//! - no record is confirmed by a term after a later term was elected (two leaders confirming in
//!   overlapping lease windows);
//! - every confirmed record is in the log of every later leader when it starts leading.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use hourglass_cluster::election::{decide, Decision, InSync, NodeRecord, Observation};
use hourglass_cluster::in_sync::{may_confirm, InSyncRules, InSyncStep, Progress, Replicas};
use hourglass_cluster::lease::LeaseClock;

use crate::model::{Answer, End, Micros, ModelEtcd, Network, Op, Rng, MS, SECOND};

pub const TTL: Micros = 3 * SECOND;
const POLL: Micros = 150 * MS;
const ETCD_TIMEOUT: Micros = 1_500 * MS;
const HOLDOFF: Micros = 2 * TTL;
const RESTART: Micros = 300 * MS;
const REPLICATE_EVERY: Micros = 20 * MS;
const HEARTBEAT_EVERY: Micros = 500 * MS;
const PUBLISH_EVERY: Micros = 50 * MS;

/// How a run is set up.
#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    /// Clock rates are drawn from `1 ± max_drift`.
    pub max_drift: f64,
    /// Faults are injected until then; then everything heals.
    pub faults_until: Micros,
    pub run_until: Micros,
    /// Whether to inject random faults (otherwise a test drives the network itself).
    pub random_faults: bool,
    /// The share of etcd requests and answers lost (a timeout at the node), in thousandths.
    pub etcd_loss_per_mille: u64,
}

/// What broke, with the trace that led to it.
#[derive(Debug)]
pub struct Violation {
    pub what: String,
    pub trace: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Wake { node: usize, life: u64 },
    EtcdArrives { node: usize, life: u64, call: u64, op: Op },
    Reply { node: usize, life: u64, call: u64, answer: Option<Answer> },
    Replicate { leader: usize, life: u64 },
    Entries { from: usize, to: usize, term: u64, base: usize, base_hash: u64, entries: Vec<u64> },
    Ack { from: usize, to: usize, term: u64, seq: usize },
    Refused { from: usize, to: usize, term: u64 },
    Publish,
    Fault,
    HealAll,
    Restart { node: usize },
}

/// Where a node's loop is, waiting for the answer to `call`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Await {
    Nothing,
    Join,
    KeepAlive { sent: Instant },
    Observe,
    Campaign { seen: Observation },
    LeaderKey,
    Alive,
    PutInSync { set: Vec<String>, removed: Vec<String> },
    GiveUp,
}

struct Hub {
    term: u64,
    rules: InSyncRules,
    progress: BTreeMap<String, Progress>,
    in_sync: BTreeSet<String>,
    recorded: Option<BTreeSet<String>>,
    lease_until: Instant,
    deposed: bool,
    confirmed: usize,
    min: usize,
}

struct Node {
    name: String,
    rate: f64,
    offset: Micros,
    /// Bumped at each restart: events of an earlier life are dropped.
    life: u64,
    paused_until: Micros,
    down: bool,
    log: Vec<u64>,
    hashes: Vec<u64>,
    lease: Option<(i64, LeaseClock)>,
    fence_max: u64,
    fence_leader: Option<(usize, u64)>,
    campaign_not_before: Option<Instant>,
    hub: Option<Hub>,
    awaiting: Await,
    call: u64,
    /// The last delivery time on each outgoing replication path (TCP keeps order).
    path_clock: BTreeMap<usize, Micros>,
}

pub struct World {
    setup: Setup,
    rng: Rng,
    now: Micros,
    base: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Micros, u64, Event)>>,
    etcd: ModelEtcd,
    net: Network,
    nodes: Vec<Node>,
    next_record: u64,
    /// (term, record, global time) of every confirm.
    confirms: Vec<(u64, u64, Micros)>,
    /// (term, log when it started leading) of every leader.
    leaders: Vec<(u64, Vec<u64>)>,
    elected_at: BTreeMap<u64, Micros>,
    pub trace: Vec<String>,
    /// Whether clients publish (a quiet spell: no op for the followers to acknowledge).
    traffic: bool,
    pub last_confirm: Micros,
    pub faults_healed_at: Option<Micros>,
}

fn hash_after(previous: u64, record: u64) -> u64 {
    (previous ^ record).wrapping_mul(0x100_0000_01B3).rotate_left(17)
}

impl World {
    pub fn new(setup: Setup) -> World {
        let mut rng = Rng::new(setup.seed);
        let names: Vec<String> = (0..3).map(|i| format!("n{i}")).collect();
        let nodes = names
            .iter()
            .map(|name| Node {
                name: name.clone(),
                rate: 1.0 + (rng.unit() * 2.0 - 1.0) * setup.max_drift,
                offset: rng.between(0, 10 * SECOND),
                life: 0,
                paused_until: 0,
                down: false,
                log: Vec::new(),
                hashes: Vec::new(),
                lease: None,
                fence_max: 0,
                fence_leader: None,
                campaign_not_before: None,
                hub: None,
                awaiting: Await::Nothing,
                call: 0,
                path_clock: BTreeMap::new(),
            })
            .collect();
        let mut world = World {
            etcd: ModelEtcd::new(TTL, names),
            setup,
            rng,
            now: 0,
            base: Instant::now(),
            seq: 0,
            queue: BinaryHeap::new(),
            net: Network::default(),
            nodes,
            next_record: 1,
            confirms: Vec::new(),
            leaders: Vec::new(),
            elected_at: BTreeMap::new(),
            trace: Vec::new(),
            traffic: true,
            last_confirm: 0,
            faults_healed_at: None,
        };
        for node in 0..3 {
            let at = world.rng.between(0, 500 * MS);
            world.at(at, Event::Restart { node });
        }
        world.at(PUBLISH_EVERY, Event::Publish);
        if world.setup.random_faults {
            world.at(2 * SECOND, Event::Fault);
            world.at(world.setup.faults_until, Event::HealAll);
        }
        world
    }

    fn at(&mut self, when: Micros, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((when, self.seq, event)));
    }

    fn log(&mut self, line: String) {
        self.trace.push(format!("{:>9.3}s {line}", self.now as f64 / SECOND as f64));
    }

    /// Node `n`'s clock now.
    fn clock(&self, n: usize) -> Instant {
        let node = &self.nodes[n];
        self.base + Duration::from_micros(node.offset + (self.now as f64 * node.rate) as u64)
    }

    /// A span of node `n`'s clock, in global time.
    fn global(&self, n: usize, local: Micros) -> Micros {
        (local as f64 / self.nodes[n].rate).ceil() as Micros
    }

    /// Runs until the end of the setup or the first violation.
    pub fn run(&mut self) -> Result<(), Violation> {
        while self.queue.peek().is_some_and(|Reverse((when, _, _))| *when <= self.setup.run_until) {
            let Some(Reverse((when, _, event))) = self.queue.pop() else { break };
            self.now = when;
            if let Some(node) = self.paused_target(&event) {
                let until = self.nodes[node].paused_until;
                self.at(until, event);
                continue;
            }
            self.handle(event)?;
        }
        Ok(())
    }

    fn paused_target(&self, event: &Event) -> Option<usize> {
        let node = match event {
            Event::Wake { node, .. } | Event::Reply { node, .. } | Event::Replicate { leader: node, .. } => {
                *node
            }
            Event::Entries { to, .. } | Event::Ack { to, .. } | Event::Refused { to, .. } => *to,
            _ => return None,
        };
        (self.nodes[node].paused_until > self.now).then_some(node)
    }

    fn alive(&self, node: usize, life: u64) -> bool {
        !self.nodes[node].down && self.nodes[node].life == life
    }

    fn handle(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Restart { node } => self.restart(node),
            Event::Wake { node, life } if self.alive(node, life) => self.iterate(node),
            Event::EtcdArrives { node, life, call, op } => self.etcd_arrives(node, life, call, op),
            Event::Reply { node, life, call, answer } if self.alive(node, life) => {
                if self.nodes[node].call == call && self.nodes[node].awaiting != Await::Nothing {
                    self.answered(node, answer)?;
                } else if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
                    let current = (self.nodes[node].call, self.nodes[node].awaiting.clone());
                    self.log(format!("n{node} ignores answer to call {call} {answer:?}: now {current:?}"));
                }
            }
            Event::Replicate { leader, life } if self.alive(leader, life) => self.replicate(leader),
            Event::Entries { from, to, term, base, base_hash, entries } => {
                self.entries(from, to, term, base, base_hash, entries)
            }
            Event::Ack { from, to, term, seq } => self.acked(from, to, term, seq)?,
            Event::Refused { from, to, term } => {
                let name = self.nodes[from].name.clone();
                if let Some(hub) = self.nodes[to].hub.as_mut().filter(|hub| hub.term == term) {
                    hub.progress.entry(name).or_default().on_disconnect();
                }
            }
            Event::Publish => self.publish()?,
            Event::Fault => self.fault(),
            Event::HealAll => {
                self.net.heal_all();
                self.traffic = true;
                self.faults_healed_at = Some(self.now);
                self.log("heal all".into());
            }
            _ => {}
        }
        Ok(())
    }

    // --- node lifecycle -------------------------------------------------------------------

    fn restart(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.life += 1;
        node.down = false;
        node.lease = None;
        node.fence_max = 0;
        node.fence_leader = None;
        node.hub = None;
        node.awaiting = Await::Nothing;
        node.path_clock.clear();
        let life = node.life;
        self.log(format!("{} starts", self.nodes[n].name));
        self.at(self.now, Event::Wake { node: n, life });
    }

    fn crash(&mut self, n: usize, down_for: Micros) {
        self.nodes[n].down = true;
        self.nodes[n].life += 1;
        self.nodes[n].hub = None;
        self.log(format!("{} crashes for {} ms", self.nodes[n].name, down_for / MS));
        self.at(self.now + down_for, Event::Restart { node: n });
    }

    fn sleep(&mut self, n: usize, local: Micros) {
        let life = self.nodes[n].life;
        let when = self.now + self.global(n, local);
        self.at(when, Event::Wake { node: n, life });
    }

    fn call(&mut self, n: usize, op: Op, awaiting: Await) {
        let node = &mut self.nodes[n];
        node.call += 1;
        node.awaiting = awaiting;
        let (call, life) = (node.call, node.life);
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::EtcdArrives { node: n, life, call, op });
        }
        let timeout = self.now + self.global(n, ETCD_TIMEOUT);
        self.at(timeout, Event::Reply { node: n, life, call, answer: None });
    }

    fn etcd_arrives(&mut self, n: usize, life: u64, call: u64, op: Op) {
        let answer = self.etcd.apply(n, &op, self.now);
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: n{n} {op:?} -> {answer:?}"));
        }
        if let (Op::Campaign { .. }, Answer::Won(Some(term))) = (&op, &answer) {
            self.elected_at.insert(*term as u64, self.now);
            self.log(format!("etcd: {} elected, term {term}", self.nodes[n].name));
        }
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::Reply { node: n, life, call, answer: Some(answer) });
        } else if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: answer to n{n} lost (lost {lost})"));
        }
    }

    /// The start of one loop iteration: the lease first, as the coordinator does.
    fn iterate(&mut self, n: usize) {
        if self.nodes[n].awaiting != Await::Nothing {
            return;
        }
        let now = self.clock(n);
        match self.nodes[n].lease {
            None => self.call(n, Op::Join, Await::Join),
            Some((lease, clock)) if clock.renewal_due(now) => {
                self.call(n, Op::KeepAlive { lease }, Await::KeepAlive { sent: now })
            }
            Some(_) => self.after_lease(n),
        }
    }

    fn after_lease(&mut self, n: usize) {
        if self.nodes[n].hub.is_none() {
            return self.call(n, Op::Observe, Await::Observe);
        }
        let now = self.clock(n);
        let holds = self.nodes[n].lease.is_some_and(|(_, clock)| clock.holds(now));
        if !holds {
            return self.step_down(n, "lease lost");
        }
        self.call(n, Op::GetLeader, Await::LeaderKey);
    }

    fn answered(&mut self, n: usize, answer: Option<Answer>) -> Result<(), Violation> {
        let awaiting = std::mem::replace(&mut self.nodes[n].awaiting, Await::Nothing);
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("n{n} answered {awaiting:?}: {answer:?}"));
        }
        let now = self.clock(n);
        match (awaiting, answer) {
            (Await::Join, Some(Answer::Joined { lease })) => {
                self.nodes[n].lease = Some((lease, LeaseClock::granted(Duration::from_micros(TTL), now)));
                self.after_lease(n);
            }
            (Await::KeepAlive { sent }, Some(Answer::TtlLeft(left))) if left > 0 => {
                if let Some((_, clock)) = self.nodes[n].lease.as_mut() {
                    clock.renewed(sent, Duration::from_secs(left));
                }
                self.after_lease(n);
            }
            (Await::KeepAlive { .. }, Some(Answer::TtlLeft(_))) => {
                self.nodes[n].lease = None;
                match self.nodes[n].hub.is_some() {
                    true => self.step_down(n, "lease expired"),
                    false => self.sleep(n, POLL),
                }
            }
            (Await::Observe, Some(Answer::Seen { leader, in_sync, alive: _ })) => {
                self.observed(n, leader, in_sync)?
            }
            (Await::Campaign { seen }, Some(Answer::Won(Some(term)))) => {
                self.start_leading(n, term as u64, &seen)?
            }
            (Await::LeaderKey, Some(Answer::Leader(key))) => {
                let term = self.nodes[n].hub.as_ref().map(|hub| hub.term as i64);
                match key {
                    Some((_, rev)) if Some(rev) == term => self.call(n, Op::Observe, Await::Alive),
                    _ => self.step_down(n, "superseded or key gone"),
                }
            }
            (Await::Alive, Some(Answer::Seen { alive, .. })) => self.maintain_in_sync(n, &alive)?,
            (Await::PutInSync { set, removed }, Some(Answer::Done(true))) => {
                self.log(format!("{} records in-sync {set:?}", self.nodes[n].name));
                if let Some(hub) = self.nodes[n].hub.as_mut() {
                    hub.rules.recorded(&set);
                    hub.recorded = Some(set.iter().skip(1).cloned().collect());
                    for name in &removed {
                        hub.in_sync.remove(name);
                    }
                }
                self.try_confirm(n)?;
                self.sleep(n, POLL);
            }
            (Await::PutInSync { .. }, Some(Answer::Done(false))) => self.step_down(n, "superseded"),
            (Await::GiveUp, _) => self.restart_later(n),
            (awaiting, _) => {
                // A timeout, a lost reply, a lost campaign: the loop goes on.
                let leading = self.nodes[n].hub.is_some();
                if leading && matches!(awaiting, Await::KeepAlive { .. }) {
                    self.after_lease(n);
                    return Ok(());
                }
                self.sleep(n, POLL);
            }
        }
        Ok(())
    }

    fn observed(
        &mut self,
        n: usize,
        leader: Option<(usize, i64, i64)>,
        in_sync: Option<(Vec<String>, i64)>,
    ) -> Result<(), Violation> {
        let record = |i: usize| NodeRecord {
            name: format!("n{i}"),
            host: String::new(),
            amqp_port: 0,
            http_port: 0,
            replication_port: 0,
            amqps_port: None,
            https_port: None,
        };
        let seen = Observation {
            leader: leader.map(|(i, term, _)| (record(i), term as u64)),
            leader_lease: leader.map_or(0, |(_, _, lease)| lease),
            in_sync: in_sync.map(|(nodes, rev)| (InSync { term: 0, nodes }, rev)),
        };
        let my_lease = self.nodes[n].lease.map_or(0, |(id, _)| id);
        match decide(&self.nodes[n].name, my_lease, &seen) {
            Decision::Lead(term) => return self.start_leading(n, term, &seen),
            Decision::Follow(_, term) => {
                let (i, _, _) = leader.expect("a leader to follow");
                if self.nodes[n].fence_leader != Some((i, term)) {
                    self.log(format!("{} follows n{i} (term {term})", self.nodes[n].name));
                }
                let node = &mut self.nodes[n];
                if node.fence_max <= term {
                    node.fence_max = term;
                    node.fence_leader = Some((i, term));
                }
                self.sleep(n, POLL);
            }
            Decision::Campaign { .. }
                if self.nodes[n].campaign_not_before.is_some_and(|at| self.clock(n) < at) =>
            {
                self.sleep(n, POLL)
            }
            Decision::Campaign { in_sync_revision } => {
                let lease = self.nodes[n].lease.map(|(id, _)| id).unwrap_or(0);
                self.call(n, Op::Campaign { lease, in_sync_revision }, Await::Campaign { seen })
            }
            Decision::Wait => self.sleep(n, POLL),
        }
        Ok(())
    }

    fn start_leading(&mut self, n: usize, term: u64, seen: &Observation) -> Result<(), Violation> {
        let me = self.nodes[n].name.clone();
        let recorded: Option<BTreeSet<String>> =
            seen.in_sync.as_ref().map(|(set, _)| set.nodes.iter().filter(|x| **x != me).cloned().collect());
        let inherited = recorded.clone().map(|mut set| {
            set.insert(me.clone());
            set
        });
        let lease_until = self.nodes[n].lease.map(|(_, c)| c.valid_until()).unwrap_or(self.clock(n));
        let grace_until = self.clock(n) + Duration::from_micros(TTL);
        let node = &mut self.nodes[n];
        node.fence_max = node.fence_max.max(term);
        node.hub = Some(Hub {
            term,
            rules: InSyncRules::new(&me, inherited, 2, Duration::from_micros(TTL / 3), grace_until),
            progress: BTreeMap::new(),
            in_sync: BTreeSet::new(),
            recorded,
            lease_until,
            deposed: false,
            confirmed: node.log.len(),
            min: 2,
        });
        let log = node.log.clone();
        let life = node.life;
        self.log(format!("{me} leads term {term} with {} records", log.len()));
        for (term_before, record, _) in &self.confirms {
            if *term_before < term && log.binary_search(record).is_err() {
                return Err(self.violation(format!(
                    "record {record} confirmed in term {term_before} is missing from {me}, leader of term {term}"
                )));
            }
        }
        self.leaders.push((term, log));
        self.at(self.now, Event::Replicate { leader: n, life });
        self.sleep(n, 0);
        Ok(())
    }

    fn maintain_in_sync(&mut self, n: usize, alive: &BTreeSet<String>) -> Result<(), Violation> {
        let now = self.clock(n);
        let last = self.nodes[n].log.len() as u64;
        let lease_until = self.nodes[n].lease.map(|(_, c)| c.valid_until());
        let Some(hub) = self.nodes[n].hub.as_mut() else { return Ok(()) };
        if let Some(until) = lease_until {
            hub.lease_until = until;
        }
        let ready: Vec<String> = hub
            .progress
            .iter()
            .filter(|(name, p)| {
                p.caught_up(last, now, Duration::from_micros(TTL)) && !hub.in_sync.contains(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        hub.in_sync.extend(ready);
        let reachable = hub
            .progress
            .iter()
            .filter(|(_, p)| p.reachable(now, Duration::from_micros(TTL)))
            .map(|(name, _)| name.clone())
            .collect();
        let replicas = Replicas { in_sync: hub.in_sync.clone(), reachable };
        let term = hub.term as i64;
        match hub.rules.next(now, &replicas, alive) {
            InSyncStep::Keep => {
                self.try_confirm(n)?;
                self.sleep(n, POLL);
            }
            InSyncStep::StepDown { unreachable } => {
                self.log(format!("{} cut off from {unreachable:?}", self.nodes[n].name));
                self.depose(n);
                self.call(n, Op::DeleteLeaderIf { term }, Await::GiveUp);
            }
            InSyncStep::Record { set, removed } => {
                self.try_confirm(n)?;
                self.call(
                    n,
                    Op::PutInSyncIfLeader { term, set: set.clone() },
                    Await::PutInSync { set, removed },
                )
            }
        }
        Ok(())
    }

    fn depose(&mut self, n: usize) {
        if let Some(hub) = self.nodes[n].hub.as_mut() {
            hub.deposed = true;
        }
    }

    fn step_down(&mut self, n: usize, why: &str) {
        self.log(format!("{} steps down: {why}", self.nodes[n].name));
        self.depose(n);
        self.restart_later(n);
    }

    /// The process replaces itself: a new life after a moment, holding off its campaigns.
    fn restart_later(&mut self, n: usize) {
        self.nodes[n].down = true;
        self.nodes[n].life += 1;
        self.nodes[n].hub = None;
        let holdoff = self.clock(n) + Duration::from_micros(HOLDOFF);
        self.nodes[n].campaign_not_before = Some(holdoff);
        self.at(self.now + RESTART, Event::Restart { node: n });
    }

    // --- replication ------------------------------------------------------------------------

    fn publish(&mut self) -> Result<(), Violation> {
        let publishing = if self.traffic { 0..3 } else { 0..0 };
        for n in publishing {
            let paused = self.nodes[n].paused_until > self.now;
            let leading = self.nodes[n].hub.as_ref().is_some_and(|hub| !hub.deposed);
            if leading && !self.nodes[n].down && !paused {
                let record = self.next_record;
                self.next_record += 1;
                let node = &mut self.nodes[n];
                let hash = hash_after(node.hashes.last().copied().unwrap_or(0), record);
                node.log.push(record);
                node.hashes.push(hash);
                self.try_confirm(n)?;
            }
        }
        self.at(self.now + PUBLISH_EVERY, Event::Publish);
        Ok(())
    }

    fn replicate(&mut self, n: usize) {
        let Some(hub) = self.nodes[n].hub.as_ref() else { return };
        if hub.deposed {
            return;
        }
        let term = hub.term;
        let heartbeat = (self.now / REPLICATE_EVERY).is_multiple_of(HEARTBEAT_EVERY / REPLICATE_EVERY);
        let mut sends = Vec::new();
        for to in (0..3).filter(|to| *to != n) {
            let name = &self.nodes[to].name;
            let progress = hub.progress.get(name).copied().unwrap_or_default();
            // A new link starts over from the files; a live one sends what the follower lacks.
            let base = if progress.connected { progress.acked as usize } else { 0 };
            let base = base.min(self.nodes[n].log.len());
            // Nothing new: every 500 ms the empty delta is the heartbeat the follower answers.
            if progress.connected && base == self.nodes[n].log.len() && !heartbeat {
                continue;
            }
            let base_hash = if base == 0 { 0 } else { self.nodes[n].hashes[base - 1] };
            sends.push((to, base, base_hash, self.nodes[n].log[base..].to_vec()));
        }
        for (to, base, base_hash, entries) in sends {
            self.send_entries(n, to, term, base, base_hash, entries);
        }
        let life = self.nodes[n].life;
        self.at(self.now + REPLICATE_EVERY, Event::Replicate { leader: n, life });
    }

    fn path_delivery(&mut self, from: usize, to: usize) -> Option<Micros> {
        if !self.net.up(End::Node(from), End::Node(to)) {
            return None;
        }
        let delay = self.rng.between(100, 5 * MS);
        let last = self.nodes[from].path_clock.get(&to).copied().unwrap_or(0);
        let when = (self.now + delay).max(last);
        self.nodes[from].path_clock.insert(to, when);
        Some(when)
    }

    fn send_entries(
        &mut self,
        from: usize,
        to: usize,
        term: u64,
        base: usize,
        base_hash: u64,
        entries: Vec<u64>,
    ) {
        if let Some(when) = self.path_delivery(from, to) {
            self.at(when, Event::Entries { from, to, term, base, base_hash, entries });
        }
    }

    fn entries(&mut self, from: usize, to: usize, term: u64, base: usize, base_hash: u64, entries: Vec<u64>) {
        let node = &self.nodes[to];
        let named = node.fence_leader == Some((from, term)) && node.fence_max == term;
        let reply = if node.down || node.hub.is_some() || !named {
            Event::Refused { from: to, to: from, term }
        } else if base > 0 && node.hashes.get(base - 1) != Some(&base_hash) {
            // Not the prefix the leader assumed: it starts this link over from the files.
            Event::Refused { from: to, to: from, term }
        } else {
            let node = &mut self.nodes[to];
            node.log.truncate(base);
            node.hashes.truncate(base);
            for record in entries {
                let hash = hash_after(node.hashes.last().copied().unwrap_or(0), record);
                node.log.push(record);
                node.hashes.push(hash);
            }
            Event::Ack { from: to, to: from, term, seq: node.log.len() }
        };
        if let Some(when) = self.path_delivery(to, from) {
            self.at(when, reply);
        }
    }

    fn acked(&mut self, from: usize, to: usize, term: u64, seq: usize) -> Result<(), Violation> {
        let now = self.clock(to);
        let name = self.nodes[from].name.clone();
        let Some(hub) = self.nodes[to].hub.as_mut().filter(|hub| hub.term == term && !hub.deposed) else {
            return Ok(());
        };
        let progress = hub.progress.entry(name).or_default();
        if !progress.connected {
            progress.on_connect(now);
        }
        progress.on_ack(seq as u64, true, now);
        self.try_confirm(to)
    }

    fn try_confirm(&mut self, n: usize) -> Result<(), Violation> {
        let now = self.clock(n);
        let node = &mut self.nodes[n];
        let Some(hub) = node.hub.as_mut() else { return Ok(()) };
        if hub.deposed || now >= hub.lease_until {
            return Ok(());
        }
        let mut newly = Vec::new();
        while hub.confirmed < node.log.len() {
            let seq = hub.confirmed as u64 + 1;
            let acked = |name: &str| hub.progress.get(name).map(|p| p.acked);
            if !may_confirm(seq, hub.min, &hub.in_sync, hub.recorded.as_ref(), acked) {
                break;
            }
            newly.push(node.log[hub.confirmed]);
            hub.confirmed += 1;
        }
        let term = hub.term;
        for record in newly {
            self.confirmed(term, record)?;
        }
        Ok(())
    }

    fn confirmed(&mut self, term: u64, record: u64) -> Result<(), Violation> {
        for (later, log) in &self.leaders {
            if *later > term && log.binary_search(&record).is_err() {
                return Err(self.violation(format!(
                    "record {record} confirmed in term {term} is missing from term {later}"
                )));
            }
        }
        if let Some(elected) = self.elected_at.iter().find(|(t, at)| **t > term && **at <= self.now) {
            return Err(self.violation(format!(
                "term {term} confirmed record {record} after term {} was elected at {} us",
                elected.0, elected.1
            )));
        }
        self.confirms.push((term, record, self.now));
        self.last_confirm = self.now;
        Ok(())
    }

    fn violation(&self, what: String) -> Violation {
        let mut trace = self.trace.clone();
        trace.push(format!("{:>9.3}s VIOLATION: {what}", self.now as f64 / SECOND as f64));
        Violation { what, trace }
    }

    // --- faults ----------------------------------------------------------------------------

    fn leader_now(&self) -> Option<usize> {
        (0..3).find(|n| self.nodes[*n].hub.as_ref().is_some_and(|hub| !hub.deposed))
    }

    /// Clients publish (`true`) or stay quiet.
    pub fn set_traffic(&mut self, on: bool) {
        self.traffic = on;
    }

    /// Cuts `node` from every other node and from etcd.
    pub fn isolate(&mut self, node: usize) {
        self.cut_from_peers(node);
        self.net.cut(End::Node(node), End::Etcd);
    }

    /// A follower of the current leader (the first by index).
    pub fn a_follower(&self) -> Option<usize> {
        let leader = self.leader_now()?;
        (0..3).find(|n| *n != leader)
    }

    /// Cuts the paths between `node` and every other node (etcd reachable).
    pub fn cut_from_peers(&mut self, node: usize) {
        for other in (0..3).filter(|o| *o != node) {
            self.net.cut(End::Node(node), End::Node(other));
        }
    }

    /// Runs the world up to global time `until`.
    pub fn run_to(&mut self, until: Micros) -> Result<(), Violation> {
        let end = self.setup.run_until;
        self.setup.run_until = until;
        let result = self.run();
        self.setup.run_until = end;
        result
    }

    pub fn leader(&self) -> Option<usize> {
        self.leader_now()
    }

    /// The first confirm at or after `at`.
    pub fn first_confirm_after(&self, at: Micros) -> Option<Micros> {
        let i = self.confirms.partition_point(|(_, _, t)| *t < at);
        self.confirms.get(i).map(|(_, _, t)| *t)
    }

    pub fn now(&self) -> Micros {
        self.now
    }

    fn fault(&mut self) {
        let node = self.rng.between(0, 2) as usize;
        let other = (node + 1 + self.rng.between(0, 1) as usize) % 3;
        let target = if self.rng.chance(500) { self.leader_now().unwrap_or(node) } else { node };
        let lasting = self.rng.between(300 * MS, 8 * SECOND);
        match self.rng.between(0, 9) {
            0 => {
                self.net.cut(End::Node(target), End::Etcd);
                self.log(format!("cut n{target} from etcd"));
            }
            1 => {
                self.cut_from_peers(target);
                self.log(format!("cut n{target} from its peers"));
            }
            2 => {
                self.cut_from_peers(target);
                self.net.cut(End::Node(target), End::Etcd);
                self.log(format!("isolate n{target}"));
            }
            3 => {
                self.net.cut(End::Node(node), End::Node(other));
                self.log(format!("cut n{node} from n{other}"));
            }
            4 => {
                // A second SIGSTOP does not shorten the first (and events keep their order).
                let until = self.nodes[target].paused_until.max(self.now + lasting);
                self.nodes[target].paused_until = until;
                self.log(format!("pause n{target} for {} ms", lasting / MS));
            }
            5 => self.crash(target, lasting),
            6 => {
                for n in 0..3 {
                    self.net.cut(End::Node(n), End::Etcd);
                }
                self.log("etcd unreachable".into());
            }
            8 => {
                self.traffic = !self.traffic;
                self.log(format!("traffic {}", if self.traffic { "on" } else { "off" }));
            }
            _ => {
                self.net.heal_all();
                self.log("heal".into());
            }
        }
        let next = self.now + self.rng.between(200 * MS, 4 * SECOND);
        if next < self.setup.faults_until {
            self.at(next, Event::Fault);
        }
    }
}
