//! etcd reached over TLS (`--etcd-cacert`, `--etcd-cert`, `--etcd-key`; docs/clustering.md): with
//! an etcd that takes only TLS clients holding a certificate from its CA, two nodes elect a
//! leader and come in sync through it, and a node without a client certificate cannot join.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::{free_port, Cluster, Etcd, TestPki};

/// How long a node that cannot reach etcd takes at most to give up (each endpoint's request
/// timeout, with room for a slow machine).
const REFUSAL_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn nodes_coordinate_through_an_etcd_that_requires_client_certificates() {
    let dir = std::env::temp_dir().join(format!("hourglass-etcd-tls-{}", std::process::id()));
    let pki = TestPki::create(&dir);
    let Some(etcd) = Etcd::start_with(Some(&pki)) else { return };
    let url = etcd.url.clone();
    let flags = ["--etcd-cacert", &pki.ca, "--etcd-cert", &pki.cert, "--etcd-key", &pki.key];
    let cluster = Cluster::start_on(etcd, 2, &flags);
    let leader = cluster.wait_in_sync(Duration::from_secs(60));
    assert!(leader == "n1" || leader == "n2", "{leader}");

    // The CA alone is not enough: etcd asks for a client certificate, and the node stops.
    let replication = free_port().to_string();
    let secret = cluster.secret.as_ref().expect("the cluster's secret").as_str().to_owned();
    let stranger = [
        "--cluster-secret-file",
        &secret,
        "--replication-port",
        &replication,
        "--node-name",
        "stranger",
        "--etcd-endpoints",
        &url,
        "--etcd-cacert",
        &pki.ca,
    ];
    let (status, printed) = common::run_until_exit(&dir.join("stranger"), &stranger, REFUSAL_WITHIN);
    assert!(!status.success(), "{printed}");
    assert!(printed.contains("joining the cluster through etcd"), "{printed}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
