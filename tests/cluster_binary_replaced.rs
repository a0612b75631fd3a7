//! A leader that steps down restarts itself as a follower by re-executing its own program. When
//! the program's file was replaced or removed meanwhile (a package upgrade under a running
//! cluster), that restart must still run: before, it looked the program up by path
//! (`/proc/self/exe` resolves to "… (deleted)"), failed with "cannot restart as a follower: No
//! such file or directory", and the node was gone for good. Real etcd, real processes; the
//! nodes run a copy of the binary that the test removes; the leader steps down after a SIGSTOP.
//!
//! In a file of its own: it points `HOURGLASS_E2E_BIN` of this test process at the copy.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::Cluster;

const WITHIN: Duration = Duration::from_secs(40);

#[test]
fn a_leader_whose_program_file_was_removed_still_rejoins_as_a_follower() {
    let copy = std::env::temp_dir().join(format!("hourglass-replaced-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_hourglass"), &copy).expect("copy the binary");
    // Only this test runs in this process (a file of its own).
    std::env::set_var("HOURGLASS_E2E_BIN", &copy);
    let Some(mut cluster) = Cluster::start(3, &[]) else {
        let _ = std::fs::remove_file(&copy);
        return;
    };
    let leader = cluster.wait_in_sync(WITHIN);
    std::fs::remove_file(&copy).expect("remove the program file under the running nodes");

    // The leader pauses past its lease: another node is elected, and when it resumes it finds
    // its term over and restarts itself as a follower.
    cluster.node(&leader).stop_signal();
    let new_leader = cluster.wait_new_leader(&leader, WITHIN);
    cluster.node(&leader).cont_signal();
    let deadline = Instant::now() + WITHIN;
    loop {
        if let Some(status) = cluster.node(&leader).exited() {
            let log = cluster.node(&leader).log.lock().unwrap().join("\n");
            panic!("{leader} exited ({status}) instead of rejoining:\n{log}");
        }
        let view = cluster.view().expect("a view of the cluster");
        let rejoined = view["nodes"].as_array().is_some_and(|nodes| {
            nodes
                .iter()
                .any(|n| n["name"] == leader.as_str() && n["in_sync"] == true && n["caught_up"] == true)
        });
        if rejoined && view["leader"] == new_leader.as_str() {
            break;
        }
        assert!(Instant::now() < deadline, "{leader} did not rejoin within {WITHIN:?}: {view}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
