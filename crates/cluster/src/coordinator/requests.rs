//! What the coordinator's state machines ask of etcd ([`Request`]) and what they are told back
//! ([`Reply`]), and the [`EtcdPort`] trait a driver performs them through: the real etcd client
//! ([`EtcdRequests`]) in the broker, a model etcd in the simulation and the unit tests.

use std::collections::BTreeSet;

use crate::election::{InSync, Keys, NodeRecord, Observation};
use crate::etcd::{Etcd, EtcdError, Range};

/// One request of a coordinator to etcd. Each is one etcd round trip, or a few for `Register`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Request {
    /// Grant a new lease and register this node on it (its record, and its membership).
    Register,
    /// Renew the lease.
    KeepAlive { lease: i64 },
    /// Read the leader key, the in-sync key, the live nodes and the members, in one snapshot.
    Observe,
    /// Create the leader key on `lease` if there is none and the in-sync key is still at
    /// `in_sync_revision` (0: there is none).
    Campaign { lease: i64, in_sync_revision: i64 },
    /// Write the in-sync set, if the leader key is still the one of `term`.
    RecordInSync { term: u64, nodes: Vec<String> },
    /// Delete the leader key, if it is still the one of `term`: a leader giving up its term, or
    /// a follower deposing a leader it found dead (`dead_leader.rs`).
    GiveUp { term: u64 },
}

/// etcd's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `Register`: the new lease.
    Registered { lease: i64 },
    /// `KeepAlive`: the seconds the lease has left (0: it had expired).
    TtlLeft(u64),
    /// `Observe`.
    Seen(Seen),
    /// `Campaign`: the term won, or `None`.
    Won(Option<u64>),
    /// `RecordInSync` and `GiveUp`: whether the guarded write happened.
    Done(bool),
}

/// What one `Observe` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub observation: Observation,
    /// The nodes whose lease etcd holds.
    pub live: Vec<NodeRecord>,
    /// Every node that ever joined: the cluster's size.
    pub members: Vec<NodeRecord>,
}

impl Seen {
    /// The names of the live nodes.
    pub fn alive(&self) -> BTreeSet<String> {
        self.live.iter().map(|node| node.name.clone()).collect()
    }
}

/// Performs the coordinator's requests, blocking until etcd answers or the request fails.
pub trait EtcdPort {
    fn perform(&self, request: &Request) -> Result<Reply, EtcdError>;
}

/// [`EtcdPort`] on a real etcd, for node `node` of the cluster whose keys are `keys`.
pub struct EtcdRequests<'a> {
    pub etcd: &'a Etcd,
    pub keys: &'a Keys,
    pub node: &'a NodeRecord,
    pub lease_ttl_secs: u64,
}

impl EtcdPort for EtcdRequests<'_> {
    fn perform(&self, request: &Request) -> Result<Reply, EtcdError> {
        let (etcd, keys) = (self.etcd, self.keys);
        let record = serde_json::to_vec(self.node).unwrap_or_default();
        match request {
            Request::Register => {
                let lease = etcd.grant_lease(self.lease_ttl_secs)?;
                etcd.put(&keys.node(&self.node.name), &record, lease)?;
                etcd.put(&keys.member(&self.node.name), &record, 0)?;
                Ok(Reply::Registered { lease })
            }
            Request::KeepAlive { lease } => Ok(Reply::TtlLeft(etcd.keep_alive(*lease)?.max(0) as u64)),
            Request::Observe => observe(etcd, keys).map(Reply::Seen),
            Request::Campaign { lease, in_sync_revision } => {
                let won = etcd.create_if_absent_and_unchanged(
                    &keys.leader(),
                    &record,
                    *lease,
                    &keys.in_sync(),
                    *in_sync_revision,
                )?;
                Ok(Reply::Won(won.map(|term| term as u64)))
            }
            Request::RecordInSync { term, nodes } => {
                let value =
                    serde_json::to_vec(&InSync { term: *term, nodes: nodes.clone() }).unwrap_or_default();
                Ok(Reply::Done(etcd.put_if_created_at(
                    &keys.leader(),
                    *term as i64,
                    &keys.in_sync(),
                    &value,
                )?))
            }
            Request::GiveUp { term } => {
                Ok(Reply::Done(etcd.delete_if_created_at(&keys.leader(), *term as i64)?))
            }
        }
    }
}

/// The four reads of an `Observe`, in one etcd transaction (one round trip, one revision).
fn observe(etcd: &Etcd, keys: &Keys) -> Result<Seen, EtcdError> {
    let [leader, in_sync, live, members]: [Vec<crate::etcd::KeyValue>; 4] = etcd
        .read_many(&[
            Range::Key(keys.leader()),
            Range::Key(keys.in_sync()),
            Range::Prefix(keys.nodes()),
            Range::Prefix(keys.members()),
        ])?
        .try_into()
        .map_err(|_| EtcdError::Unreadable { path: "/v3/kv/txn", reason: "not four ranges".into() })?;
    let (leader, leader_lease) = match leader.first() {
        Some(kv) => (
            serde_json::from_slice::<NodeRecord>(&kv.value).ok().map(|n| (n, kv.create_revision as u64)),
            kv.lease,
        ),
        None => (None, 0),
    };
    let in_sync = in_sync
        .first()
        .and_then(|kv| serde_json::from_slice::<InSync>(&kv.value).ok().map(|s| (s, kv.mod_revision)));
    let records = |kvs: Vec<crate::etcd::KeyValue>| -> Vec<NodeRecord> {
        kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect()
    };
    Ok(Seen {
        observation: Observation { leader, leader_lease, in_sync },
        live: records(live),
        members: records(members),
    })
}
