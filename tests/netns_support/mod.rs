//! A small network of Linux network namespaces for partition tests: one namespace holding a
//! bridge, and one namespace per member (etcd, each node, the client), each joined to the bridge
//! by a veth pair, on a /24 of its own. [`Topology::cut`] and [`Topology::heal`] blackhole the
//! traffic between two members both ways (by routes, or by rules that lose it silently:
//! [`CutMode`]); [`Topology::run_in`] runs test code on a thread that
//! has entered a member's namespace (its sockets, and those of threads it starts, are there).
//!
//! Everything is made with `ip` (iproute2) and needs root. Where namespaces cannot be made the
//! tests say SKIPPED and pass, unless `HOURGLASS_REQUIRE_NETNS` is set (CI): then they fail.
//! Dropping the [`Topology`] deletes its namespaces, after ending (by PID) any process still in
//! them; processes started by the harness are normally ended before, by their own drops.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;

use crate::cluster_support::Placement;

/// How a cut drops packets; `HOURGLASS_NETNS_CUT=drop` makes every topology use
/// [`CutMode::Drop`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CutMode {
    /// `ip route add blackhole PEER/32` on both sides: a sender's own packets are refused
    /// (connect fails at once with EINVAL), established connections hear nothing more.
    Blackhole,
    /// A `blackhole` policy rule for packets arriving from the peer, on both sides: the sender's
    /// packets leave and are lost on the way in, so a connect hangs, as behind a dead switch.
    Drop,
}

impl CutMode {
    /// `wanted`, unless `HOURGLASS_NETNS_CUT=drop` asks for [`CutMode::Drop`].
    fn or_from_env(wanted: CutMode) -> CutMode {
        match std::env::var("HOURGLASS_NETNS_CUT").as_deref() {
            Ok("drop") => CutMode::Drop,
            _ => wanted,
        }
    }
}

/// The priority of [`CutMode::Drop`]'s rules: before the `local` table's, moved to 100.
const DROP_RULE_PREF: &str = "10";

/// One member: its namespace and its address on the bridge.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub netns: String,
    pub address: String,
}

/// The namespaces, links and cuts of one test.
pub struct Topology {
    bridge_netns: String,
    members: Vec<Member>,
    mode: CutMode,
    /// Cuts in force, each as an ordered pair of member names.
    cuts: Mutex<BTreeSet<(String, String)>>,
}

/// Runs `ip ARGS`; its stderr when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip").args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&output.stderr).trim())),
    }
}

/// A prefix for this test's names, unique per process and per topology, and the subnet's first
/// three octets, also derived from both.
fn unique_prefix_and_subnet() -> (String, [u8; 3]) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (pid, n) = (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    (format!("hg{pid}x{n}"), [10, (pid % 250) as u8 + 1, (n % 250) as u8 + 1])
}

/// `false` after saying why, when namespaces cannot be made here and they are not required.
fn netns_unavailable(error: &str) -> bool {
    assert!(
        std::env::var_os("HOURGLASS_REQUIRE_NETNS").is_none(),
        "network namespaces cannot be made and HOURGLASS_REQUIRE_NETNS is set: {error}"
    );
    eprintln!("SKIPPED: network namespaces cannot be made (needs root and iproute2): {error}");
    false
}

impl Topology {
    /// A bridge and one namespace per name in `members`, whose cuts are made as `mode` says,
    /// or `None` (after saying why) where namespaces cannot be made and are not required.
    pub fn create(members: &[&str], mode: CutMode) -> Option<Topology> {
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(remove_leftovers);
        let (prefix, [a, b, c]) = unique_prefix_and_subnet();
        let mut topology = Topology {
            bridge_netns: format!("{prefix}-br"),
            members: Vec::new(),
            mode: CutMode::or_from_env(mode),
            cuts: Mutex::new(BTreeSet::new()),
        };
        if let Err(error) = topology.make_bridge() {
            netns_unavailable(&error);
            return None;
        }
        for (i, name) in members.iter().enumerate() {
            let member = Member {
                name: (*name).to_owned(),
                netns: format!("{prefix}-{name}"),
                address: format!("{a}.{b}.{c}.{}", 10 + i),
            };
            // Pushed first, so that a half-made member's namespace is deleted too.
            topology.members.push(member.clone());
            if let Err(error) = topology.join_bridge(i, &member) {
                netns_unavailable(&error);
                return None;
            }
        }
        Some(topology)
    }

    fn make_bridge(&self) -> Result<(), String> {
        let ns = self.bridge_netns.as_str();
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", ns, "link", "set", "br0", "up"])
    }

    /// The member's namespace, with loopback up and `eth0` at its address; the veth's other end
    /// `p{i}` is a port of the bridge. The link names live only inside these namespaces.
    fn join_bridge(&self, i: usize, member: &Member) -> Result<(), String> {
        let (bridge, ns, port) = (self.bridge_netns.as_str(), member.netns.as_str(), format!("p{i}"));
        ip(&["netns", "add", ns])?;
        ip(&["-n", bridge, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
        ip(&["-n", bridge, "link", "set", &port, "master", "br0", "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{}/24", member.address), "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        if self.mode == CutMode::Drop {
            // Packets to local addresses match the `local` table's rule (pref 0) before any
            // other: it moves behind the drop rules (pref DROP_RULE_PREF).
            ip(&["-n", ns, "rule", "add", "pref", "100", "lookup", "local"])?;
            ip(&["-n", ns, "rule", "del", "pref", "0", "lookup", "local"])?;
        }
        Ok(())
    }

    pub fn mode(&self) -> CutMode {
        self.mode
    }

    pub fn member(&self, name: &str) -> &Member {
        self.members.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no member {name}"))
    }

    /// Where a process of `name` runs: its namespace and address.
    pub fn placement(&self, name: &str) -> Placement {
        let member = self.member(name);
        Placement { netns: Some(member.netns.clone()), host: member.address.clone() }
    }

    /// Runs `body` on a thread inside `name`'s namespace and returns what it returns; a panic in
    /// it is a panic here.
    pub fn run_in<R: Send>(&self, name: &str, body: impl FnOnce() -> R + Send) -> R {
        let netns = self.member(name).netns.clone();
        std::thread::scope(|scope| {
            let thread = scope.spawn(move || {
                enter_netns(&netns);
                body()
            });
            thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Blackholes the traffic between members `a` and `b`, both ways.
    pub fn cut(&self, a: &str, b: &str) {
        let pair = ordered(a, b);
        if self.cuts.lock().unwrap().insert(pair) {
            self.drop_from(a, b, "add");
            self.drop_from(b, a, "add");
        }
    }

    /// Undoes [`Topology::cut`] of `a` and `b`.
    pub fn heal(&self, a: &str, b: &str) {
        if self.cuts.lock().unwrap().remove(&ordered(a, b)) {
            self.drop_from(a, b, "del");
            self.drop_from(b, a, "del");
        }
    }

    /// Cuts `name` from every other member.
    pub fn isolate(&self, name: &str) {
        for other in self.members.iter().filter(|m| m.name != name) {
            self.cut(name, &other.name);
        }
    }

    /// Heals every cut in force.
    pub fn heal_all(&self) {
        let cuts: Vec<(String, String)> = self.cuts.lock().unwrap().iter().cloned().collect();
        for (a, b) in cuts {
            self.heal(&a, &b);
        }
    }

    /// In `at`'s namespace, adds or deletes (`change`) the rule that loses `peer`'s traffic.
    fn drop_from(&self, at: &str, peer: &str, change: &str) {
        let (ns, peer) = (self.member(at).netns.as_str(), format!("{}/32", self.member(peer).address));
        let result = match self.mode {
            CutMode::Blackhole => ip(&["-n", ns, "route", change, "blackhole", &peer]),
            CutMode::Drop => ip(&[
                "-n",
                ns,
                "rule",
                change,
                "pref",
                DROP_RULE_PREF,
                "from",
                &peer,
                "iif",
                "eth0",
                "blackhole",
            ]),
        };
        result.unwrap_or_else(|error| panic!("{error}"));
    }

    /// PIDs of processes (other than this test process) whose network namespace is `netns`.
    fn pids_in(netns: &str) -> Vec<u32> {
        let output = Command::new("ip").args(["netns", "pids", netns]).output();
        let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        text.split_whitespace().filter_map(|p| p.parse().ok()).filter(|p| *p != std::process::id()).collect()
    }
}

/// The test process that made namespace `netns` (named `hg{pid}x{n}-…` by
/// [`unique_prefix_and_subnet`]), if the name is one of ours.
fn maker_pid(netns: &str) -> Option<u32> {
    let rest = netns.strip_prefix("hg")?;
    let (pid, rest) = rest.split_once('x')?;
    let (n, _) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// Deletes the namespaces a test process left behind when it was killed before its `Drop` ran
/// (and ends the brokers and etcd it had started in them): those whose maker is gone.
pub fn remove_leftovers() {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else { return };
    let listing = String::from_utf8_lossy(&output.stdout).into_owned();
    for netns in listing.lines().filter_map(|line| line.split_whitespace().next()) {
        let Some(pid) = maker_pid(netns) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        for pid in Topology::pids_in(netns) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = ip(&["netns", "del", netns]);
        eprintln!("removed the namespace {netns} left by test process {pid}, which is gone");
    }
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// Moves the calling thread into the network namespace `netns` (`setns(2)`).
fn enter_netns(netns: &str) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(format!("/run/netns/{netns}")).expect("open the namespace");
    // SAFETY: setns on a file descriptor this function owns; it changes only this thread.
    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns into {netns}: {}", std::io::Error::last_os_error());
}

impl Drop for Topology {
    fn drop(&mut self) {
        let namespaces = self.members.iter().map(|m| m.netns.clone()).chain([self.bridge_netns.clone()]);
        for netns in namespaces {
            for pid in Topology::pids_in(&netns) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            // Deleting a namespace removes its end of every veth pair, and so the pair.
            let _ = ip(&["netns", "del", &netns]);
        }
    }
}
