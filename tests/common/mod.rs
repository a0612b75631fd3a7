//! Starts the real `hourglass` binary on loopback for end-to-end tests.
#![allow(dead_code)]

pub mod http_wire;
pub mod raw_amqp;
pub mod sqs_wire;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long the binary may take to log its listeners.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running broker process; killed when dropped.
pub struct RunningBroker {
    child: Child,
    pub amqp: SocketAddr,
    pub http: SocketAddr,
    /// The SQS endpoint, when started with `--sqs-port` (port 0 too: the start line names it).
    pub sqs: Option<SocketAddr>,
    pub data_dir: std::path::PathBuf,
    /// Every line the broker logged so far (stdout).
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl RunningBroker {
    /// Starts the binary on 127.0.0.1 with OS-chosen ports and a fresh data directory.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts with extra flags and a fresh data directory.
    pub fn start_with(extra: &[&str]) -> Self {
        let data_dir =
            std::env::temp_dir().join(format!("hourglass-e2e-{}-{}", std::process::id(), unique()));
        Self::spawn(data_dir, extra)
    }

    pub fn start_in(data_dir: std::path::PathBuf) -> Self {
        Self::spawn(data_dir, &[])
    }

    /// Starts on an existing data directory with extra flags.
    pub fn start_in_with(data_dir: std::path::PathBuf, extra: &[&str]) -> Self {
        Self::spawn(data_dir, extra)
    }

    /// The data directory, kept when the broker is killed or terminated.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.data_dir.clone()
    }

    fn spawn(data_dir: std::path::PathBuf, extra: &[&str]) -> Self {
        // HOURGLASS_E2E_BIN: another build of the binary (a release one, for measurements).
        let binary =
            std::env::var("HOURGLASS_E2E_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hourglass").to_owned());
        // Loopback unless the test names its own `--bind`.
        let bind: &[&str] = if extra.contains(&"--bind") { &[] } else { &["--bind", "127.0.0.1"] };
        let mut child = Command::new(binary)
            .args(bind)
            .args(["--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"])
            .args(extra)
            .arg("--data-dir")
            .arg(&data_dir)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hourglass");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(mut lines) = lines.lock() {
                    lines.push(line.clone());
                }
                if !sent {
                    // A listener switched off (`--plain-amqp false`) shows as `amqp=off`: 0.0.0.0:0.
                    let addr = |key: &str| {
                        let off = format!("{key}off");
                        parse_addr(&line, key)
                            .or_else(|| line.contains(&off).then(|| SocketAddr::from(([0, 0, 0, 0], 0))))
                    };
                    if let (Some(amqp), Some(http)) = (addr("amqp="), addr("http=")) {
                        let sqs = parse_addr(&line, "sqs=");
                        let _ = tx.send((amqp, http, sqs));
                        sent = true;
                    }
                }
            }
        });
        let (amqp, http, sqs) = match rx.recv_timeout(START_TIMEOUT) {
            Ok(addrs) => addrs,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                panic!("hourglass ended ({status}) before it logged its listeners (its error is on stderr)");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("hourglass did not log its AMQP listener within {START_TIMEOUT:?}");
            }
        };
        RunningBroker { child, amqp, http, sqs, data_dir, log }
    }

    /// The last `count` lines logged so far.
    pub fn last_log_lines(&self, count: usize) -> Vec<String> {
        let lines = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        lines[lines.len().saturating_sub(count)..].to_vec()
    }

    /// The lines logged so far that contain `text`.
    pub fn log_lines_with(&self, text: &str) -> Vec<String> {
        let lines = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        lines.into_iter().filter(|l| l.contains(text)).collect()
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.amqp)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The broker's resident memory (VmRSS from /proc), in bytes; 0 once it is gone.
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes(self.pid())
    }

    /// Kills the process with SIGKILL (`kill -9`: no shutdown, no flush) and waits for it;
    /// returns the data directory, kept for a restart with `start_in`.
    pub fn kill9(mut self) -> std::path::PathBuf {
        let _ = Command::new("kill").args(["-KILL", &self.child.id().to_string()]).status();
        let _ = wait_with_timeout(&mut self.child, Duration::from_secs(15));
        let data_dir = self.data_dir.clone();
        std::mem::forget(self);
        data_dir
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = wait_with_timeout(&mut self.child, Duration::from_secs(15));
        std::mem::forget(self);
        status
    }
}

impl Drop for RunningBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Runs the binary on `data_dir` (loopback, OS-chosen ports, then `extra`) expecting it to stop by
/// itself within `within` (else it is killed and the test fails): its exit status and everything
/// it printed, stdout then stderr.
pub fn run_until_exit(
    data_dir: &std::path::Path,
    extra: &[&str],
    within: Duration,
) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hourglass"))
        .args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"])
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hourglass");
    // It prints little (a few log lines and the error): the pipes hold it all while it runs.
    let status = wait_with_timeout(&mut child, within);
    let output = child.wait_with_output().expect("its output");
    let printed =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (status, printed)
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("hourglass did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Process `pid`'s resident memory (VmRSS from /proc), in bytes; 0 if it cannot be read.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    kib * 1024
}

/// Process `pid`'s CPU time so far (user and system, from /proc), in clock ticks (1/100 s on
/// Linux); 0 if it cannot be read.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses: state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(14) + field(15)
}

/// Finds `amqp=127.0.0.1:PORT` (or `http=…`) in the start-up log line.
pub fn parse_addr(line: &str, key: &str) -> Option<SocketAddr> {
    let start = line.find(key)? + key.len();
    let rest = &line[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub async fn connect(broker: &RunningBroker) -> lapin::Connection {
    lapin::Connection::connect(&broker.url(), lapin::ConnectionProperties::default()).await.expect("connect")
}

/// A connection attempt that may fail.
pub async fn connect_result(broker: &RunningBroker) -> lapin::Result<lapin::Connection> {
    lapin::Connection::connect(&broker.url(), lapin::ConnectionProperties::default()).await
}

/// GET `path` on the Prometheus listener, found through `/api/overview`'s `http/prometheus`
/// listener; the body of its 200 answer.
pub async fn scrape(broker: &RunningBroker, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (status, body) = http(broker, "GET", "/api/overview", "").await;
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    let port = overview["listeners"]
        .as_array()
        .and_then(|all| all.iter().find(|l| l["protocol"] == "http/prometheus"))
        .and_then(|l| l["port"].as_u64())
        .expect("a prometheus listener");
    let addr = SocketAddr::new(broker.http.ip(), port as u16);
    let scraped = async {
        let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect prometheus");
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        socket.write_all(request.as_bytes()).await.expect("send scrape");
        let mut response = Vec::new();
        socket.read_to_end(&mut response).await.expect("read scrape");
        response
    };
    let response = tokio::time::timeout(Duration::from_secs(10), scraped).await.expect("scrape in time");
    let text = String::from_utf8(response).expect("UTF-8 exposition");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

/// A minimal HTTP/1.1 request as guest to the management API; returns the status code and body.
pub async fn http(broker: &RunningBroker, method: &str, path: &str, body: &str) -> (u16, String) {
    http_as(broker, ("guest", "guest"), method, path, body).await
}

/// The same request as another user (`(name, password)`).
pub async fn http_as(
    broker: &RunningBroker,
    user: (&str, &str),
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(broker.http).await.expect("connect http");
    let request = http_wire::request_as(user, method, path, body);
    // A server may answer before it has read the whole body (a refusal) and close: the write then
    // fails with a broken pipe, and the answer is what the caller needs to see.
    let sent = socket.write_all(request.as_bytes()).await;
    let mut response = Vec::new();
    let read = socket.read_to_end(&mut response).await;
    match http_wire::parse_response(&response) {
        Some(answer) => answer,
        None => panic!(
            "{method} {path}: no HTTP answer (send: {sent:?}, read: {read:?}); the broker's last log lines:\n{}",
            broker.last_log_lines(30).join("\n")
        ),
    }
}
