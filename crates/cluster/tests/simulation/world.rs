//! Three nodes running the coordinator's own state machines (`coordinator::Following` and
//! `coordinator::Leading`, which hold every election, lease, in-sync and step-down rule) against
//! the model etcd and a replication model, driven by one seeded event queue. Each node's clock
//! runs at its own rate.
//! The two invariants are checked as the run goes:
//! - no record is confirmed by a term after a later term was elected (two leaders confirming in
//!   overlapping lease windows);
//! - every confirmed record is in the log of every later leader when it starts leading.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use hourglass_cluster::coordinator::{Following, Leading, Reply, Request};
use hourglass_cluster::in_sync::{may_confirm, Progress};

use crate::model::{End, Micros, ModelEtcd, Network, Rng, MS, SECOND};

mod faults;
mod node_loop;
mod replication;

pub const TTL: Micros = 3 * SECOND;
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

#[derive(Clone, Debug)]
enum Event {
    Wake {
        node: usize,
        life: u64,
    },
    EtcdArrives {
        node: usize,
        life: u64,
        call: u64,
        request: Request,
    },
    /// etcd's reply to `call`, or `None`: the request timed out.
    Reply {
        node: usize,
        life: u64,
        call: u64,
        reply: Option<Reply>,
    },
    Replicate {
        leader: usize,
        life: u64,
    },
    Entries(Delta),
    Ack {
        from: usize,
        to: usize,
        term: u64,
        seq: usize,
    },
    Refused {
        from: usize,
        to: usize,
        term: u64,
    },
    Publish,
    Fault,
    HealAll,
    Restart {
        node: usize,
    },
}

/// An event due at `when`; ties go in the order they were scheduled (`seq`).
struct Scheduled {
    when: Micros,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Scheduled) -> bool {
        (self.when, self.seq) == (other.when, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Scheduled) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Scheduled) -> std::cmp::Ordering {
        (self.when, self.seq).cmp(&(other.when, other.seq))
    }
}

/// Which of the coordinator's machines a node runs.
enum Machine {
    /// Started, not yet registered in etcd (registering since `sent` if `Some`).
    Joining {
        sent: Option<Instant>,
    },
    Following(Following),
    Leading(Leading),
}

/// The leader's replication hub, as the simulation keeps it.
struct Hub {
    term: u64,
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
    fence_max: u64,
    fence_leader: Option<(usize, u64)>,
    campaign_not_before: Option<Instant>,
    machine: Machine,
    hub: Option<Hub>,
    /// Whether the machine waits for etcd's answer to `call`.
    asking: bool,
    call: u64,
    /// The last delivery time on each outgoing replication path (TCP keeps order).
    path_clock: BTreeMap<usize, Micros>,
    /// The leader (node, term) whose replication stream to this node ended as a crashed
    /// process's does, not yet looked at (`dead_leader.rs`: the coordinator probes it then).
    ended_stream: Option<(usize, u64)>,
}

pub struct World {
    setup: Setup,
    rng: Rng,
    now: Micros,
    base: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
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

/// What a leader sends a follower: its log after `base` (whose prefix hashes to `base_hash`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Delta {
    from: usize,
    to: usize,
    term: u64,
    base: usize,
    base_hash: u64,
    entries: Vec<u64>,
}

fn hash_after(previous: u64, record: u64) -> u64 {
    (previous ^ record).wrapping_mul(0x100_0000_01B3).rotate_left(17)
}

impl Node {
    /// Appends `record` to the log, with the hash of the log through it.
    fn append(&mut self, record: u64) {
        self.hashes.push(hash_after(self.hashes.last().copied().unwrap_or(0), record));
        self.log.push(record);
    }
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
                fence_max: 0,
                fence_leader: None,
                campaign_not_before: None,
                machine: Machine::Joining { sent: None },
                hub: None,
                asking: false,
                call: 0,
                path_clock: BTreeMap::new(),
                ended_stream: None,
            })
            .collect();
        let mut world = World {
            etcd: ModelEtcd::new(TTL, names.len()),
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
        self.queue.push(Reverse(Scheduled { when, seq: self.seq, event }));
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
        while self.queue.peek().is_some_and(|Reverse(next)| next.when <= self.setup.run_until) {
            let Some(Reverse(Scheduled { when, event, .. })) = self.queue.pop() else { break };
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
            Event::Entries(Delta { to, .. }) | Event::Ack { to, .. } | Event::Refused { to, .. } => *to,
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
            Event::Wake { node, life } if self.alive(node, life) => self.iterate(node)?,
            Event::EtcdArrives { node, life, call, request } => self.etcd_arrives(node, life, call, request),
            Event::Reply { node, life, call, reply } if self.alive(node, life) => {
                if self.nodes[node].call == call && self.nodes[node].asking {
                    self.nodes[node].asking = false;
                    self.answered(node, reply)?;
                } else if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
                    let current = self.nodes[node].call;
                    self.log(format!(
                        "n{node} ignores answer to call {call} {reply:?}: now at call {current}"
                    ));
                }
            }
            Event::Replicate { leader, life } if self.alive(leader, life) => self.replicate(leader),
            Event::Entries(delta) => self.entries(delta),
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

    fn leader_now(&self) -> Option<usize> {
        (0..3).find(|n| self.nodes[*n].hub.as_ref().is_some_and(|hub| !hub.deposed))
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
}
