//! Issue 22: a 2xx is durable — in a cluster, as a confirm is. A user change is written through
//! the broker task and the store thread like every definition, so it is answered only once a
//! majority of the nodes hold it; while the followers cannot acknowledge, it is not answered,
//! and logins are not held up meanwhile. Before, the change was committed on the HTTP worker
//! thread, which then sat in the replication wait: a login sent meanwhile got no answer within
//! 1 s. Real etcd and real processes; the followers are SIGSTOPped for a moment, well inside
//! their lease.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::{http_request_as, Cluster, Node};
use serde_json::json;

const GUEST: (&str, &str) = ("guest", "guest");

fn http_address(node: &Node) -> String {
    format!("{}:{}", node.placement.host, node.http)
}

#[test]
fn a_user_change_is_answered_only_once_a_majority_holds_it() {
    let Some(cluster) = Cluster::start(3, &[]) else { return };
    let leader_name = cluster.wait_in_sync(Duration::from_secs(40));
    let leader = cluster.nodes.iter().find(|n| n.name == leader_name).expect("the leader");
    let followers: Vec<&Node> = cluster.nodes.iter().filter(|n| n.name != leader_name).collect();
    let address = http_address(leader);
    let body = json!({"password": "pw", "tags": ""}).to_string();
    assert_eq!(http_request_as(&address, GUEST, "PUT", "/api/users/before", &body).map(|r| r.0), Some(201));

    for follower in &followers {
        follower.stop_signal();
    }
    // Not answered while no follower acknowledges (the request gives up after 1 s).
    let answered = http_request_as(&address, GUEST, "PUT", "/api/users/held", &body);
    // Meanwhile a login is answered at once.
    let started = Instant::now();
    let whoami = http_request_as(&address, GUEST, "GET", "/api/whoami", "").map(|r| r.0);
    let login_took = started.elapsed();
    for follower in &followers {
        follower.cont_signal();
    }
    assert_eq!(answered, None, "a user change was answered while no follower held it");
    assert_eq!(whoami, Some(200));
    assert!(login_took < Duration::from_millis(900), "a login waited {login_took:?} behind a user change");

    // Once they acknowledge, the change is made and answered like any other.
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_request_as(&address, GUEST, "GET", "/api/users/held", "").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < deadline, "the held change never completed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = json!({"password": "pw", "tags": ""}).to_string();
    assert_eq!(http_request_as(&address, GUEST, "PUT", "/api/users/after", &after).map(|r| r.0), Some(201));
}
