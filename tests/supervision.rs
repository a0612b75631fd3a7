//! Supervision (issue #21; CONTRIBUTING "Long-lived tasks are supervised"): when the broker task,
//! the store thread or the cluster coordinator dies, the process exits non-zero with a line
//! naming the part — it does not listen on, and in a cluster it gives its lease back so that
//! another node leads. The deaths are injected by the test-only `HOURGLASS_TEST_INJECT_DEATH`.

mod cluster_support;
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster_support::Cluster;

/// The injected death comes this long after the part starts.
const DIES_AFTER: &str = "2";
/// The process must be gone within this of the start (death after 2 s, then the exit).
const EXITS_WITHIN: Duration = Duration::from_secs(20);

/// Runs a single node with `part` made to die; its exit status and every line it printed.
fn single_node_with_death_of(part: &str) -> (std::process::ExitStatus, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("hourglass-supervision-{part}-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hourglass"))
        .args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"])
        .arg("--data-dir")
        .arg(&dir)
        .env("HOURGLASS_TEST_INJECT_DEATH", format!("{part}:{DIES_AFTER}"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hourglass");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > EXITS_WITHIN {
            let _ = child.kill();
            panic!("hourglass still runs {EXITS_WITHIN:?} after its {part} was made to die");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut lines: Vec<String> = Vec::new();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        lines.extend(BufReader::new(stream).lines().map_while(Result::ok));
    }
    let _ = std::fs::remove_dir_all(&dir);
    (status, lines)
}

fn has(lines: &[String], text: &str) -> bool {
    lines.iter().any(|l| l.contains(text))
}

#[test]
fn a_dead_broker_task_ends_the_process_non_zero_naming_it() {
    let (status, lines) = single_node_with_death_of("broker-task");
    assert!(!status.success(), "{status}: {lines:?}");
    assert!(has(&lines, "hourglass: the broker task died (panicked: injected death"), "{lines:?}");
}

#[test]
fn a_dead_store_thread_ends_the_process_non_zero_naming_it() {
    let (status, lines) = single_node_with_death_of("store-thread");
    assert!(!status.success(), "{status}: {lines:?}");
    assert!(has(&lines, "hourglass: the store thread died (panicked: injected death"), "{lines:?}");
}

/// A clustered leader whose `part` dies exits non-zero naming it, after revoking its lease.
fn leader_exits_when_its_part_dies(part: &str, line: &str) {
    let Some(etcd) = cluster_support::Etcd::start() else { return };
    let death = format!("{part}:5");
    let mut cluster = Cluster::start_on_with_env(etcd, 1, &[], &[("HOURGLASS_TEST_INJECT_DEATH", &death)]);
    let node = &mut cluster.nodes[0];
    let ended = node.wait_exit(Duration::from_secs(60));
    let (status, _) = ended.expect("the leader still runs after its part died");
    let lines = node.log_lines_with("");
    assert!(has(&lines, "elected leader"), "it never led: {lines:?}");
    assert!(!status.success(), "{status}: {lines:?}");
    assert!(has(&lines, line), "{lines:?}");
    assert!(has(&lines, "left the cluster: lease revoked"), "{lines:?}");
}

#[test]
fn a_leader_whose_broker_task_dies_gives_back_its_lease_and_exits_non_zero() {
    leader_exits_when_its_part_dies("broker-task", "hourglass: the broker task died");
}

#[test]
fn a_leader_whose_coordinator_dies_gives_back_its_lease_and_exits_non_zero() {
    leader_exits_when_its_part_dies("coordinator", "hourglass: the cluster coordinator died");
}
