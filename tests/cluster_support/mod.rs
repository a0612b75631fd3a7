//! A real etcd and real `hourglass` nodes on loopback, for the cluster tests: start, `kill -9`,
//! SIGSTOP/SIGCONT, restart on the same ports and data directory; the cluster's view through
//! `GET /api/cluster`. Test files that use it also declare `mod common;` (its HTTP text).
//!
//! A [`Placement`] puts etcd or a node in a network namespace at its own address instead
//! (tests/netns_support makes the namespaces).
//!
//! etcd comes from Debian's `etcd-server` (`.ci/run` installs it). Without it the tests say so
//! and pass only when `HOURGLASS_REQUIRE_ETCD` is unset; CI sets it, so there they fail.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::http_wire;

/// A free loopback port for a server that a test restarts on the same port.
///
/// It comes from below the kernel's ephemeral range (`ip_local_port_range`): a port from inside
/// it may be taken, while its node is down, as the local port of any outgoing connection on the
/// machine, and the restarted node then cannot listen ("address in use"). Ports are handed out
/// in turn from a per-process random start and probed by binding them.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|start| *start > LOWEST + 1_000)
        .unwrap_or(32_768);
    let span = ephemeral_start - LOWEST;
    let _ = NEXT.compare_exchange(
        0,
        std::process::id().wrapping_mul(7_919) % span + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let port = (LOWEST + NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range")
}

fn scratch_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("hourglass-cluster-{what}-{}-{n}", std::process::id()))
}

/// Where a test process runs: on loopback in the test's own network namespace, or at `host` in
/// the network namespace `netns` (tests/netns_support: a namespace per process on a bridge).
#[derive(Clone, Debug)]
pub struct Placement {
    pub netns: Option<String>,
    /// The address it listens on and is reached at.
    pub host: String,
}

impl Placement {
    pub fn loopback() -> Placement {
        Placement { netns: None, host: "127.0.0.1".to_owned() }
    }

    /// `program` to be run here: through `ip netns exec`, which enters the namespace and then
    /// execs `program`, so the child's PID is `program`'s own.
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns, program]);
                command
            }
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// PEM files (paths) of a test PKI: one CA, and one certificate for 127.0.0.1 and localhost
/// that serves as a server's and as a client's.
pub struct TestPki {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

impl TestPki {
    /// Makes the CA and the certificate in `dir`.
    pub fn create(dir: &std::path::Path) -> TestPki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
            KeyPair, KeyUsagePurpose,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "Hourglass cluster test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let mut node = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        node.distinguished_name.push(DnType::CommonName, "hourglass node");
        node.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = node.signed_by(&key, &ca).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_owned()
        };
        TestPki {
            cert: write("node.pem", cert.pem()),
            key: write("node.key", key.serialize_pem()),
            ca: write("ca.pem", ca.pem()),
        }
    }
}

/// A single-member etcd on loopback; it can be paused, killed and started again on the same
/// ports and data directory.
pub struct Etcd {
    child: Option<Child>,
    pub url: String,
    dir: PathBuf,
    client: u16,
    peer: u16,
    tls: Option<(String, String, String)>,
    placement: Placement,
}

/// Whether etcd is installed; `false` (after saying so) when it is not and not required.
fn etcd_installed() -> bool {
    let installed = Command::new("etcd").arg("--version").stdout(Stdio::null()).status().is_ok();
    if !installed {
        assert!(
            std::env::var_os("HOURGLASS_REQUIRE_ETCD").is_none(),
            "etcd is not installed (Debian: apt-get install etcd-server) and HOURGLASS_REQUIRE_ETCD is set"
        );
        eprintln!("SKIPPED: etcd is not installed (Debian: apt-get install etcd-server)");
    }
    installed
}

impl Etcd {
    /// Starts etcd, or `None` (after saying why) when it is not installed and not required.
    pub fn start() -> Option<Etcd> {
        Etcd::start_with(None)
    }

    /// [`Etcd::start`]; with `tls`, its clients must use TLS and present a certificate the PKI's
    /// CA signed (etcd's `--client-cert-auth`).
    pub fn start_with(tls: Option<&TestPki>) -> Option<Etcd> {
        let mut etcd = Etcd::unstarted_with(tls)?;
        etcd.launch();
        Some(etcd)
    }

    /// An etcd with its ports and URL chosen but not running yet (nodes started before it);
    /// [`Etcd::launch`] starts it.
    pub fn unstarted() -> Option<Etcd> {
        Etcd::unstarted_with(None)
    }

    /// [`Etcd::start`] at `placement` (e.g. in a network namespace); the test's thread must be
    /// able to reach `placement.host`.
    pub fn start_at(placement: Placement) -> Option<Etcd> {
        let mut etcd = Etcd::unstarted_at(None, placement)?;
        etcd.launch();
        Some(etcd)
    }

    fn unstarted_with(tls: Option<&TestPki>) -> Option<Etcd> {
        Etcd::unstarted_at(tls, Placement::loopback())
    }

    fn unstarted_at(tls: Option<&TestPki>, placement: Placement) -> Option<Etcd> {
        if !etcd_installed() {
            return None;
        }
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}:{client}", placement.host);
        let tls = tls.map(|pki| (pki.cert.clone(), pki.key.clone(), pki.ca.clone()));
        Some(Etcd { child: None, url, dir: scratch_dir("etcd"), client, peer, tls, placement })
    }

    /// The etcd process's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the etcd process (again, after [`Etcd::kill`]: same ports, same data) and waits
    /// until it serves.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let mut command = self.placement.command("etcd");
        if let Some((cert, key, ca)) = &self.tls {
            command.args(["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca]);
            command.arg("--client-cert-auth");
        }
        let peer = format!("http://{}:{}", self.placement.host, self.peer);
        let child = command
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &self.url, "--advertise-client-urls", &self.url])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let address = format!("{}:{}", self.placement.host, self.client);
        // Over TLS only whether it listens can be seen here; etcd listens once it serves.
        let tls = self.tls.is_some();
        let up = |address: &str| match tls {
            true => std::net::TcpStream::connect(address).is_ok(),
            false => http_request(address, "GET", "/health").map(|(s, _)| s) == Some(200),
        };
        while !up(&address) {
            assert!(Instant::now() < deadline, "etcd did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGSTOP: etcd keeps its sockets but answers nothing (requests time out).
    pub fn pause(&self) {
        signal(self.child.as_ref().expect("etcd running").id(), "-STOP");
    }

    /// SIGCONT after [`Etcd::pause`].
    pub fn resume(&self) {
        signal(self.child.as_ref().expect("etcd running").id(), "-CONT");
    }

    /// `kill -9` (its data stays for [`Etcd::launch`]).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-CONT");
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One node's fixed ports and data directory (kept across restarts).
pub struct Node {
    pub name: String,
    pub amqp: u16,
    pub http: u16,
    pub metrics: u16,
    pub replication: u16,
    /// Where it runs and listens (`--bind`; other nodes reach it there too).
    pub placement: Placement,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    pub log: Arc<Mutex<Vec<String>>>,
    /// Extra environment variables for the process (the test-only death injection).
    pub env: Vec<(String, String)>,
}

impl Node {
    fn new(name: &str, etcd: &Etcd, cluster: &str, extra: &[&str], placement: Placement) -> Node {
        let (amqp, http, metrics, replication) = (free_port(), free_port(), free_port(), free_port());
        let mut args: Vec<String> = vec![
            "--bind".into(),
            placement.host.clone(),
            "--amqp-port".into(),
            amqp.to_string(),
            "--http-port".into(),
            http.to_string(),
            "--metrics-port".into(),
            metrics.to_string(),
            "--replication-port".into(),
            replication.to_string(),
            "--etcd-endpoints".into(),
            etcd.url.clone(),
            "--cluster-name".into(),
            cluster.into(),
            "--node-name".into(),
            name.into(),
        ];
        // In a namespace the test's client is another host: guest/guest may log in from it.
        if placement.netns.is_some() {
            args.extend(["--loopback-users".into(), "none".into()]);
        }
        // `{port}` in an extra flag: a port of this node's own (e.g. its TLS listeners).
        args.extend(
            extra.iter().map(|s| if *s == "{port}" { free_port().to_string() } else { (*s).to_owned() }),
        );
        let dir = scratch_dir(name);
        Node {
            name: name.into(),
            amqp,
            http,
            metrics,
            replication,
            placement,
            dir,
            args,
            child: None,
            log: Default::default(),
            env: Vec::new(),
        }
    }

    /// The value of one of the node's flags (`--sqs-port` when the cluster was started with
    /// `--sqs-port {port}`).
    pub fn flag(&self, name: &str) -> Option<&str> {
        self.args.iter().position(|a| a == name).and_then(|at| self.args.get(at + 1)).map(String::as_str)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let binary =
            std::env::var("HOURGLASS_E2E_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hourglass").to_owned());
        let mut child = self
            .placement
            .command(&binary)
            .args(&self.args)
            .arg("--data-dir")
            .arg(&self.dir)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hourglass");
        // stderr (the exit line) goes to the same log as stdout.
        let stderr = child.stderr.take().expect("stderr");
        let (log, name) = (self.log.clone(), self.name.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[{name} stderr] {line}");
                if let Ok(mut log) = log.lock() {
                    log.push(line);
                }
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let log = self.log.clone();
        let name = self.name.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if std::env::var_os("HOURGLASS_CLUSTER_LOGS").is_some() {
                    eprintln!("[{name}] {line}");
                }
                if let Ok(mut log) = log.lock() {
                    log.push(line);
                }
            }
        });
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The node's data directory (kept across restarts).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `kill -9`, and waits for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status, if the process has ended (it then counts as not running).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Waits up to `within` for the process to end by itself; its status and how long it took,
    /// or `None` (it still runs).
    pub fn wait_exit(&mut self, within: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.exited() {
                return Some((status, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM, then [`Node::wait_exit`].
    pub fn terminate(&mut self, within: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        signal(self.pid(), "-TERM");
        self.wait_exit(within)
    }

    pub fn stop_signal(&self) {
        signal(self.pid(), "-STOP");
    }

    pub fn cont_signal(&self) {
        signal(self.pid(), "-CONT");
    }

    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}:{}/%2f", self.placement.host, self.amqp)
    }

    /// `GET /api/cluster` on this node (forwarded to the leader by a follower).
    pub fn cluster_view(&self) -> Option<Value> {
        let address = format!("{}:{}", self.placement.host, self.http);
        let (status, body) = http_request(&address, "GET", "/api/cluster")?;
        if status != 200 {
            return None;
        }
        serde_json::from_str(&body).ok()
    }

    pub fn log_lines_with(&self, text: &str) -> Vec<String> {
        self.log.lock().map(|l| l.iter().filter(|l| l.contains(text)).cloned().collect()).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The secret file a test cluster's nodes share (`--cluster-secret-file`), removed when dropped.
pub struct SecretFile {
    pub path: PathBuf,
}

impl SecretFile {
    /// A fresh random secret (base64 text, as the docs' command makes) in its own scratch dir.
    pub fn create() -> SecretFile {
        use base64::Engine;
        let dir = scratch_dir("secret");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.secret");
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random)).unwrap();
        let text = base64::engine::general_purpose::STANDARD.encode(random) + "\n";
        std::fs::write(&path, text).unwrap();
        SecretFile { path }
    }

    pub fn as_str(&self) -> &str {
        self.path.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// etcd and the nodes of one cluster.
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub etcd: Etcd,
    /// The secret every node was given; `None` for a cluster on replication TLS alone.
    pub secret: Option<SecretFile>,
}

impl Cluster {
    /// `size` nodes named n1…, started together; `None` without etcd (see the module doc).
    pub fn start(size: usize, extra: &[&str]) -> Option<Cluster> {
        Some(Cluster::start_on(Etcd::start()?, size, extra))
    }

    /// [`Cluster::start`] on an etcd already running. Every node gets one shared secret file
    /// (`--cluster-secret-file`), unless `extra` turns on `--replication-tls`: that cluster
    /// authenticates its replication by certificates alone.
    pub fn start_on(etcd: Etcd, size: usize, extra: &[&str]) -> Cluster {
        Cluster::start_on_with_env(etcd, size, extra, &[])
    }

    /// [`Cluster::start_on`] with extra environment variables for every node.
    pub fn start_on_with_env(etcd: Etcd, size: usize, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_placed(etcd, &vec![Placement::loopback(); size], extra, env)
    }

    /// One node per placement (n1… in order), on an etcd already running; see
    /// [`Cluster::start_on`] for the secret.
    pub fn start_placed(
        etcd: Etcd,
        placements: &[Placement],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let cluster = format!("test{}", free_port());
        let secret = (!extra.contains(&"--replication-tls")).then(SecretFile::create);
        let mut flags: Vec<&str> = extra.to_vec();
        if let Some(secret) = &secret {
            flags.extend(["--cluster-secret-file", secret.as_str()]);
        }
        let mut nodes: Vec<Node> = placements
            .iter()
            .enumerate()
            .map(|(i, at)| Node::new(&format!("n{}", i + 1), &etcd, &cluster, &flags, at.clone()))
            .collect();
        for node in &mut nodes {
            node.env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            node.start();
        }
        Cluster { nodes, etcd, secret }
    }

    pub fn node(&mut self, name: &str) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.name == name).expect("node")
    }

    /// The cluster's view from the first running node that answers.
    pub fn view(&self) -> Option<Value> {
        self.nodes.iter().filter(|n| n.running()).find_map(Node::cluster_view)
    }

    /// Waits until one running node leads and every running node is in sync; the leader's name.
    ///
    /// In sync means caught up with this leader as well as named by the set etcd records
    /// (`caught_up` and `in_sync` in the view, lag 0). A new leader inherits the recorded set,
    /// so a follower still catching up shows `in_sync` with lag 0 from the start, yet leaves the
    /// set if another follower catches up before it: left as the only node, it may not campaign.
    /// Once caught up, the set keeps it while it stays reachable.
    pub fn wait_in_sync(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let running: Vec<&str> = self.nodes.iter().filter(|n| n.running()).map(|n| n.name.as_str()).collect();
        loop {
            if let Some(view) = self.view() {
                let leader = view["leader"].as_str().map(str::to_owned);
                let in_sync = |name: &str| {
                    view["nodes"].as_array().is_some_and(|nodes| {
                        nodes.iter().any(|n| {
                            n["name"] == name
                                && n["in_sync"] == true
                                && n["caught_up"] == true
                                && n["lag_records"] == 0
                        })
                    })
                };
                if let Some(leader) = leader {
                    if running.contains(&leader.as_str()) && running.iter().all(|n| in_sync(n)) {
                        return leader;
                    }
                }
            }
            assert!(Instant::now() < deadline, "cluster not in sync within {within:?}: {:?}", self.view());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until a running node other than `not` leads; its name.
    pub fn wait_new_leader(&self, not: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let leader = self.view().and_then(|v| v["leader"].as_str().map(str::to_owned));
            if let Some(leader) = leader.filter(|l| l != not) {
                if self.nodes.iter().any(|n| n.name == leader && n.running()) {
                    return leader;
                }
            }
            assert!(Instant::now() < deadline, "no new leader within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A running node that does not lead (clients enter through it), else any running one.
    pub fn follower_url(&self, leader: &str) -> String {
        let node = self.nodes.iter().find(|n| n.running() && n.name != leader);
        node.or_else(|| self.nodes.iter().find(|n| n.running())).expect("a running node").amqp_url()
    }
}

/// A minimal blocking HTTP/1.1 request as guest; status and body, `None` if the socket fails.
pub fn http_request(address: &str, method: &str, path: &str) -> Option<(u16, String)> {
    http_request_as(address, ("guest", "guest"), method, path, "")
}

/// [`http_request`] as `user`, with a JSON `body`.
pub fn http_request_as(
    address: &str,
    user: (&str, &str),
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let mut socket = TcpStream::connect_timeout(&address.parse().ok()?, Duration::from_secs(2)).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    socket.write_all(http_wire::request_as(user, method, path, body).as_bytes()).ok()?;
    let mut response = Vec::new();
    socket.read_to_end(&mut response).ok()?;
    http_wire::parse_response(&response)
}
