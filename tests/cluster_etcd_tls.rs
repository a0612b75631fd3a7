//! etcd reached over TLS (`--etcd-cacert`, `--etcd-cert`, `--etcd-key`; docs/clustering.md): with
//! an etcd that takes only TLS clients holding a certificate from its CA, two nodes elect a
//! leader and come in sync through it, and a node without a client certificate cannot join.

mod cluster_support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let data = dir.join("stranger");
    let mut stranger = Command::new(env!("CARGO_BIN_EXE_hourglass"))
        .args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"])
        .args(["--replication-port", &free_port().to_string(), "--node-name", "stranger"])
        .args(["--etcd-endpoints", &url, "--etcd-cacert", &pki.ca])
        .arg("--data-dir")
        .arg(&data)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hourglass");
    let deadline = Instant::now() + REFUSAL_WITHIN;
    let status = loop {
        if let Some(status) = stranger.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = stranger.kill();
            panic!("a node without a client certificate kept running");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut printed = String::new();
    if let Some(mut err) = stranger.stderr.take() {
        let _ = err.read_to_string(&mut printed);
    }
    assert!(!status.success(), "{printed}");
    assert!(printed.contains("joining the cluster through etcd"), "{printed}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
