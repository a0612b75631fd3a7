//! The simulated world: a model etcd (leases, revisions, the cluster's keys, its transactions), a
//! network of links that can be cut, and a seeded random source. Everything here is exact and
//! deterministic; time is global microseconds.

use std::collections::{BTreeMap, BTreeSet};

/// Global simulated time, in microseconds.
pub type Micros = u64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

/// SplitMix64: small, seeded, the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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

/// A request a node makes of etcd.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Grant a lease and register the node's key on it.
    Join,
    KeepAlive {
        lease: i64,
    },
    /// Read the leader key, the in-sync key and the live nodes.
    Observe,
    Campaign {
        lease: i64,
        in_sync_revision: i64,
    },
    GetLeader,
    PutInSyncIfLeader {
        term: i64,
        set: Vec<String>,
    },
    DeleteLeaderIf {
        term: i64,
    },
}

/// etcd's answer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    Joined {
        lease: i64,
    },
    TtlLeft(u64),
    Seen {
        /// The leader, its term and its lease.
        leader: Option<(usize, i64, i64)>,
        in_sync: Option<(Vec<String>, i64)>,
        alive: BTreeSet<String>,
    },
    Won(Option<i64>),
    Leader(Option<(usize, i64)>),
    Done(bool),
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
    nodes: BTreeMap<usize, i64>,
    names: Vec<String>,
}

impl ModelEtcd {
    pub fn new(ttl: Micros, names: Vec<String>) -> ModelEtcd {
        ModelEtcd {
            ttl,
            revision: 1,
            next_lease: 1,
            leases: BTreeMap::new(),
            leader: None,
            in_sync: None,
            nodes: BTreeMap::new(),
            names,
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

    /// Applies `op` from node `from` at `now`; the answer, and the term of a won campaign.
    pub fn apply(&mut self, from: usize, op: &Op, now: Micros) -> Answer {
        self.expire(now);
        match op {
            Op::Join => {
                let lease = self.next_lease;
                self.next_lease += 1;
                self.leases.insert(lease, now + self.ttl);
                self.nodes.insert(from, lease);
                self.revision += 1;
                Answer::Joined { lease }
            }
            Op::KeepAlive { lease } => match self.leases.get_mut(lease) {
                Some(at) => {
                    *at = now + self.ttl;
                    Answer::TtlLeft(self.ttl / SECOND)
                }
                None => Answer::TtlLeft(0),
            },
            Op::Observe => Answer::Seen {
                leader: self.leader.as_ref().map(|key| (key.node, key.create_revision, key.lease)),
                in_sync: self.in_sync.clone(),
                alive: self.nodes.keys().map(|n| self.names[*n].clone()).collect(),
            },
            Op::Campaign { lease, in_sync_revision } => {
                let set_unchanged = self.in_sync.as_ref().map_or(0, |(_, rev)| *rev) == *in_sync_revision;
                if self.leader.is_some() || !set_unchanged || !self.leases.contains_key(lease) {
                    return Answer::Won(None);
                }
                self.revision += 1;
                self.leader = Some(LeaderKey { node: from, create_revision: self.revision, lease: *lease });
                Answer::Won(Some(self.revision))
            }
            Op::GetLeader => Answer::Leader(self.leader.as_ref().map(|key| (key.node, key.create_revision))),
            Op::PutInSyncIfLeader { term, set } => {
                if self.leader.as_ref().is_none_or(|key| key.create_revision != *term) {
                    return Answer::Done(false);
                }
                self.revision += 1;
                self.in_sync = Some((set.clone(), self.revision));
                Answer::Done(true)
            }
            Op::DeleteLeaderIf { term } => {
                if self.leader.as_ref().is_none_or(|key| key.create_revision != *term) {
                    return Answer::Done(false);
                }
                self.leader = None;
                self.revision += 1;
                Answer::Done(true)
            }
        }
    }
}
