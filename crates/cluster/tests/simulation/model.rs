//! The simulated world: a model etcd (leases, revisions, the cluster's keys, its transactions), a
//! network of links that can be cut, and a seeded random source. Everything here is exact and
//! deterministic; time is global microseconds.

use std::collections::{BTreeMap, BTreeSet};

use hourglass_cluster::coordinator::{Reply, Request, Seen};
use hourglass_cluster::election::{InSync, NodeRecord, Observation};
use hourglass_cluster::retry::SplitMix64;

/// Global simulated time, in microseconds.
pub type Micros = u64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

/// The run's seeded random source (the crate's SplitMix64: the same sequence on every machine).
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    /// `true` with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }

    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Who is at each end of a network path: a node by index, or etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum End {
    Node(usize),
    Etcd,
}

/// Which paths are cut (both ways).
#[derive(Clone, Debug, Default)]
pub struct Network {
    cut: BTreeSet<(End, End)>,
}

impl Network {
    fn key(a: End, b: End) -> (End, End) {
        if a <= b {
            (a, b)
        } else {
            (b, a)
        }
    }

    pub fn cut(&mut self, a: End, b: End) {
        self.cut.insert(Network::key(a, b));
    }

    pub fn heal_all(&mut self) {
        self.cut.clear();
    }

    pub fn up(&self, a: End, b: End) -> bool {
        !self.cut.contains(&Network::key(a, b))
    }
}

/// Node `i`'s record (only its name matters here).
pub fn record(i: usize) -> NodeRecord {
    NodeRecord::named(&format!("n{i}"))
}

struct LeaderKey {
    node: usize,
    create_revision: i64,
    lease: i64,
}

/// One etcd member, linearizable, with leases that expire at exactly their TTL.
pub struct ModelEtcd {
    ttl: Micros,
    revision: i64,
    next_lease: i64,
    leases: BTreeMap<i64, Micros>,
    leader: Option<LeaderKey>,
    in_sync: Option<(Vec<String>, i64)>,
    /// The live nodes' leases.
    nodes: BTreeMap<usize, i64>,
    members: usize,
}

impl ModelEtcd {
    pub fn new(ttl: Micros, members: usize) -> ModelEtcd {
        ModelEtcd {
            ttl,
            revision: 1,
            next_lease: 1,
            leases: BTreeMap::new(),
            leader: None,
            in_sync: None,
            nodes: BTreeMap::new(),
            members,
        }
    }

    fn expire(&mut self, now: Micros) {
        let expired: Vec<i64> = self.leases.iter().filter(|(_, at)| **at <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.leases.remove(&id);
            if self.leader.as_ref().is_some_and(|key| key.lease == id) {
                self.leader = None;
                self.revision += 1;
            }
            let before = self.nodes.len();
            self.nodes.retain(|_, lease| *lease != id);
            if self.nodes.len() != before {
                self.revision += 1;
            }
        }
    }

    /// Applies `request` from node `from` at `now`; etcd's reply.
    pub fn apply(&mut self, from: usize, request: &Request, now: Micros) -> Reply {
        self.expire(now);
        match request {
            Request::Register => {
                let lease = self.next_lease;
                self.next_lease += 1;
                self.leases.insert(lease, now + self.ttl);
                self.nodes.insert(from, lease);
                self.revision += 1;
                Reply::Registered { lease }
            }
            Request::KeepAlive { lease } => match self.leases.get_mut(lease) {
                Some(at) => {
                    *at = now + self.ttl;
                    Reply::TtlLeft(self.ttl / SECOND)
                }
                None => Reply::TtlLeft(0),
            },
            Request::Observe => Reply::Seen(Seen {
                observation: Observation {
                    leader: self.leader.as_ref().map(|key| (record(key.node), key.create_revision as u64)),
                    leader_lease: self.leader.as_ref().map_or(0, |key| key.lease),
                    in_sync: self.in_sync.clone().map(|(nodes, rev)| (InSync { term: 0, nodes }, rev)),
                },
                live: self.nodes.keys().map(|n| record(*n)).collect(),
                members: (0..self.members).map(record).collect(),
            }),
            Request::Campaign { lease, in_sync_revision } => {
                let set_unchanged = self.in_sync.as_ref().map_or(0, |(_, rev)| *rev) == *in_sync_revision;
                if self.leader.is_some() || !set_unchanged || !self.leases.contains_key(lease) {
                    return Reply::Won(None);
                }
                self.revision += 1;
                self.leader = Some(LeaderKey { node: from, create_revision: self.revision, lease: *lease });
                Reply::Won(Some(self.revision as u64))
            }
            Request::RecordInSync { term, nodes } => {
                if !self.leads(*term) {
                    return Reply::Done(false);
                }
                self.revision += 1;
                self.in_sync = Some((nodes.clone(), self.revision));
                Reply::Done(true)
            }
            Request::GiveUp { term } => {
                if !self.leads(*term) {
                    return Reply::Done(false);
                }
                self.leader = None;
                self.revision += 1;
                Reply::Done(true)
            }
        }
    }

    /// Whether the leader key is the one of `term`.
    fn leads(&self, term: u64) -> bool {
        self.leader.as_ref().is_some_and(|key| key.create_revision as u64 == term)
    }
}
