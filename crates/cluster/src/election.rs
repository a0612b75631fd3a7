//! What the cluster keeps in etcd and the election rule, decided without I/O.
//!
//! ```text
//! {cluster}/leader          the leader's NodeRecord, attached to its lease; create revision = term
//! {cluster}/nodes/{name}    each live node's NodeRecord, attached to its lease
//! {cluster}/members/{name}  every node that ever joined (no lease): the cluster's size
//! {cluster}/in-sync         InSync: the nodes holding everything confirmed, written by the leader
//!                           only while its term lasts
//! ```
//!
//! Only a node in the in-sync set may campaign, and its campaign is one etcd transaction that
//! also checks the in-sync set has not changed since it read it: a node the leader has just
//! dropped from the set can never win with data it lacks.

use serde::{Deserialize, Serialize};

/// How the other nodes and clients reach a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub host: String,
    pub amqp_port: u16,
    pub http_port: u16,
    pub replication_port: u16,
    /// TLS client ports, when the node serves them (docs/tls.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amqps_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_port: Option<u16>,
    /// The SQS endpoint's port, when the node serves it (docs/sqs.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs_port: Option<u16>,
    /// The SQS endpoint over TLS, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs_tls_port: Option<u16>,
}

impl NodeRecord {
    /// A record with a name and nothing to reach the node at: for tests and the simulation,
    /// where only who is who matters.
    pub fn named(name: &str) -> NodeRecord {
        NodeRecord {
            name: name.to_owned(),
            host: String::new(),
            amqp_port: 0,
            http_port: 0,
            replication_port: 0,
            amqps_port: None,
            https_port: None,
            sqs_port: None,
            sqs_tls_port: None,
        }
    }

    pub fn amqp(&self) -> String {
        join_host_port(&self.host, self.amqp_port)
    }
    pub fn http(&self) -> String {
        join_host_port(&self.host, self.http_port)
    }
    pub fn replication(&self) -> String {
        join_host_port(&self.host, self.replication_port)
    }
    pub fn amqps(&self) -> Option<String> {
        self.amqps_port.map(|port| join_host_port(&self.host, port))
    }
    pub fn https(&self) -> Option<String> {
        self.https_port.map(|port| join_host_port(&self.host, port))
    }
    pub fn sqs(&self) -> Option<String> {
        self.sqs_port.map(|port| join_host_port(&self.host, port))
    }
    pub fn sqs_tls(&self) -> Option<String> {
        self.sqs_tls_port.map(|port| join_host_port(&self.host, port))
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The in-sync set as the leader of `term` last wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InSync {
    pub term: u64,
    pub nodes: Vec<String>,
}

/// The etcd keys of one cluster.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(cluster_name: &str) -> Keys {
        Keys { prefix: format!("/hourglass/{cluster_name}") }
    }
    pub fn leader(&self) -> String {
        format!("{}/leader", self.prefix)
    }
    pub fn nodes(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }
    pub fn node(&self, name: &str) -> String {
        format!("{}/nodes/{name}", self.prefix)
    }
    pub fn members(&self) -> String {
        format!("{}/members/", self.prefix)
    }
    pub fn member(&self, name: &str) -> String {
        format!("{}/members/{name}", self.prefix)
    }
    pub fn in_sync(&self) -> String {
        format!("{}/in-sync", self.prefix)
    }
}

/// What a node saw in etcd in one look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The leader and its term, if there is one.
    pub leader: Option<(NodeRecord, u64)>,
    /// The lease the leader key is attached to (0: no leader).
    pub leader_lease: i64,
    /// The in-sync set and the key's modification revision (0: no set yet, a new cluster).
    pub in_sync: Option<(InSync, i64)>,
}

/// What a node not leading does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Follow this leader of this term.
    Follow(NodeRecord, u64),
    /// Try to become leader; the campaign must find the in-sync key still at this revision.
    Campaign { in_sync_revision: i64 },
    /// No leader, and this node may not lead (it lacks confirmed data), or the leader key is
    /// this node's own from before a restart: wait for it to expire.
    Wait,
    /// etcd names this node leader on the lease it holds now: its campaign won, but the answer
    /// was lost. It leads at this term (waiting would keep the key alive, and nobody would lead).
    Lead(u64),
}

/// The election rule for node `me`, which holds lease `my_lease`.
pub fn decide(me: &str, my_lease: i64, seen: &Observation) -> Decision {
    if let Some((leader, term)) = &seen.leader {
        if leader.name == me && seen.leader_lease == my_lease && my_lease != 0 {
            return Decision::Lead(*term);
        }
        if leader.name == me {
            return Decision::Wait;
        }
        return Decision::Follow(leader.clone(), *term);
    }
    match &seen.in_sync {
        None => Decision::Campaign { in_sync_revision: 0 },
        Some((set, revision)) if set.nodes.iter().any(|n| n == me) => {
            Decision::Campaign { in_sync_revision: *revision }
        }
        Some(_) => Decision::Wait,
    }
}

/// How many nodes must hold a record before it is confirmed: a majority of the members, unless
/// the operator set `--min-in-sync`.
pub fn min_in_sync(members: usize, configured: Option<usize>) -> usize {
    configured.unwrap_or(members / 2 + 1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            host: "127.0.0.1".into(),
            amqp_port: 1,
            http_port: 2,
            replication_port: 3,
            amqps_port: None,
            https_port: None,
            sqs_port: None,
            sqs_tls_port: None,
        }
    }

    fn in_sync(nodes: &[&str], revision: i64) -> Option<(InSync, i64)> {
        Some((InSync { term: 4, nodes: nodes.iter().map(|n| (*n).to_owned()).collect() }, revision))
    }

    #[test]
    fn a_node_follows_the_leader_it_sees() {
        let seen = Observation { leader: Some((node("a"), 7)), leader_lease: 5, in_sync: in_sync(&["a"], 9) };
        assert_eq!(decide("b", 6, &seen), Decision::Follow(node("a"), 7));
    }

    #[test]
    fn only_an_in_sync_node_campaigns_and_only_against_the_set_it_read() {
        let seen = Observation { leader: None, leader_lease: 0, in_sync: in_sync(&["a", "b"], 12) };
        assert_eq!(decide("b", 6, &seen), Decision::Campaign { in_sync_revision: 12 });
        assert_eq!(decide("c", 7, &seen), Decision::Wait, "c lacks confirmed records");
    }

    #[test]
    fn a_new_cluster_lets_anyone_campaign() {
        let seen = Observation { leader: None, leader_lease: 0, in_sync: None };
        assert_eq!(decide("c", 7, &seen), Decision::Campaign { in_sync_revision: 0 });
    }

    #[test]
    fn a_restarted_node_waits_out_its_own_old_leader_key() {
        let seen = Observation { leader: Some((node("a"), 7)), leader_lease: 5, in_sync: in_sync(&["a"], 9) };
        assert_eq!(decide("a", 8, &seen), Decision::Wait);
    }

    #[test]
    fn a_node_whose_campaign_answer_was_lost_leads_at_the_term_etcd_names() {
        // Found by the simulation (seed 17): the campaign won, its answer was lost, and the
        // node waited on its own live key — nobody led.
        let seen = Observation { leader: Some((node("a"), 7)), leader_lease: 5, in_sync: in_sync(&["a"], 9) };
        assert_eq!(decide("a", 5, &seen), Decision::Lead(7));
    }

    #[test]
    fn the_confirm_quorum_is_a_majority_unless_configured() {
        assert_eq!((min_in_sync(1, None), min_in_sync(2, None), min_in_sync(3, None)), (1, 2, 2));
        assert_eq!(min_in_sync(5, None), 3);
        assert_eq!(min_in_sync(3, Some(3)), 3);
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        let mut record = node("a");
        record.host = "::1".into();
        assert_eq!(record.amqp(), "[::1]:1");
    }
}
