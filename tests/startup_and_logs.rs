//! What operators see at start (issue #13, "What operators expect"), over the real binary:
//! ordinary start-up errors are one line and a non-zero exit even with RUST_BACKTRACE=1, ports
//! are bound before the data directory is touched, logs carry no escape bytes off a terminal,
//! `--log-format json` writes JSON lines, the default bind serves IPv4 and IPv6, and
//! `--health-check` answers for a running broker.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::RunningBroker;

/// A start-up error must end the process at once; 10 s is generous for an unoptimised binary.
const FAIL_FAST: Duration = Duration::from_secs(10);
/// How long the binary may take to log its listeners.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Listing polls (50 ms apart) before a connection must show: 5 s.
const LISTING_TRIES: usize = 100;

fn hourglass() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hourglass"));
    command.env("RUST_LOG", "info").env("RUST_BACKTRACE", "1").env_remove("NO_COLOR");
    command
}

/// The lines a starting broker writes, up to its "hourglass listening" line (true) or
/// START_TIMEOUT (false). A thread keeps draining the pipe afterwards, so the broker never writes
/// into a closed pipe.
fn lines_until_listening(stdout: std::process::ChildStdout) -> (Vec<String>, bool) {
    lines_until(stdout, "hourglass listening")
}

/// The lines up to one containing `text` (true) or START_TIMEOUT (false), as above.
fn lines_until(stdout: std::process::ChildStdout, text: &str) -> (Vec<String>, bool) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.contains(text)) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => lines.push(line),
            Err(_) => return (lines, false),
        }
    }
    (lines, true)
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hourglass-startup-{tag}-{}", std::process::id()))
}

/// Runs a broker expected to fail; returns its output once it has exited (bounded by FAIL_FAST).
fn run_to_failure(mut command: Command) -> Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start hourglass");
    let deadline = Instant::now() + FAIL_FAST;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hourglass did not exit within {FAIL_FAST:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Every non-empty line the process wrote, stdout then stderr.
fn lines(output: &Output) -> Vec<String> {
    [&output.stdout, &output.stderr]
        .iter()
        .flat_map(|bytes| String::from_utf8_lossy(bytes).lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| !line.trim().is_empty())
        .collect()
}

fn assert_one_line_failure(output: &Output, expected: &str) {
    let lines = lines(output);
    assert!(!output.status.success(), "exit status {:?}", output.status);
    assert_eq!(lines.len(), 1, "one line, got {lines:#?}");
    assert!(lines[0].starts_with("hourglass: ") && lines[0].contains(expected), "{:?}", lines[0]);
}

/// An AMQP port in use: one line naming the address, non-zero exit, and the data directory is
/// never created (the ports are bound before recovery starts).
#[test]
fn port_in_use_is_one_line_and_data_dir_untouched() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data_dir = fresh_dir("port");
    let mut command = hourglass();
    command.args(["--bind", "127.0.0.1", "--amqp-port", &port, "--http-port", "0", "--metrics-port", "0"]);
    command.arg("--data-dir").arg(&data_dir);
    let output = run_to_failure(command);
    let touched = data_dir.exists();
    let _ = std::fs::remove_dir_all(&data_dir);
    assert_one_line_failure(&output, &format!("cannot listen on 127.0.0.1:{port} (AMQP): address in use"));
    assert!(!touched, "the data directory was touched");
}

/// A second broker on the same data directory: one line saying it is locked, non-zero exit.
#[test]
fn locked_data_dir_is_one_line() {
    let first = RunningBroker::start();
    let mut command = hourglass();
    command.args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"]);
    command.arg("--data-dir").arg(first.data_dir());
    let output = run_to_failure(command);
    assert_one_line_failure(&output, "is locked by another process");
}

/// A data directory that cannot be created (a file in its path): one line, non-zero exit.
#[test]
fn unusable_data_dir_is_one_line() {
    let file = fresh_dir("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let mut command = hourglass();
    command.args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"]);
    command.arg("--data-dir").arg(file.join("data"));
    let output = run_to_failure(command);
    std::fs::remove_file(&file).unwrap();
    assert_one_line_failure(&output, "cannot create data dir");
}

/// The binary under `ulimit -n FDS` (soft and hard: it cannot raise them).
fn hourglass_with_fd_limit(fds: u32, data_dir: &std::path::Path) -> Command {
    let mut command = Command::new("sh");
    command.args(["-c", &format!("ulimit -n {fds} && exec \"$0\" \"$@\"")]);
    command.arg(env!("CARGO_BIN_EXE_hourglass"));
    command.args(["--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"]);
    command.arg("--data-dir").arg(data_dir).env("RUST_LOG", "info").env("NO_COLOR", "1");
    command
}

/// The number after `key=` in `line`.
fn field(line: &str, key: &str) -> Option<usize> {
    line.split_whitespace().find_map(|part| part.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Issue 22 finding 6: at `ulimit -n 2048` the broker serves hundreds of AMQP connections (it
/// allowed one: the HTTP listeners' limits took the whole table); the HTTP listeners shrink to
/// fit instead, with a warning. A second AMQP connection is accepted.
#[test]
fn a_low_open_files_limit_still_serves_hundreds_of_connections() {
    let data_dir = fresh_dir("fds2048");
    let mut child = hourglass_with_fd_limit(2048, &data_dir).stdout(Stdio::piped()).spawn().expect("start");
    let (lines, listening) = lines_until(child.stdout.take().unwrap(), "login_failure_delay_ms=");
    let limits = lines.iter().find(|l| l.contains("login_failure_delay_ms=")).cloned();
    let amqp = lines.iter().find_map(|l| common::parse_addr(l, "amqp="));
    // Both held open at once: each is sent connection.start.
    let connected = amqp.map(|addr| [connection_start(addr), connection_start(addr)]);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data_dir);
    assert!(listening, "{lines:#?}");
    let limits = limits.expect("the limits line");
    let max_connections = field(&limits, "max_connections").expect("max_connections");
    assert!(max_connections >= 1_000, "{limits}");
    assert!(field(&limits, "http_max_connections").is_some_and(|n| n < 1_024), "{limits}");
    assert!(lines.iter().any(|l| l.contains("HTTP connection limit lowered")), "{lines:#?}");
    assert!(connected.is_some());
}

/// Below what serves a hundred connections the start is refused in one line naming `ulimit -n`.
#[test]
fn an_open_files_limit_too_low_to_serve_is_one_line() {
    let data_dir = fresh_dir("fds300");
    let output = run_to_failure(hourglass_with_fd_limit(300, &data_dir));
    let _ = std::fs::remove_dir_all(&data_dir);
    assert_one_line_failure(&output, "ulimit -n");
}

/// A broker whose stdout is a pipe; its start-up lines up to the listening line are collected.
struct Started {
    child: Child,
    lines: Vec<String>,
    data_dir: std::path::PathBuf,
}

impl Started {
    fn new(tag: &str, args: &[&str]) -> Started {
        let data_dir = fresh_dir(tag);
        let mut child = hourglass()
            .args(["--amqp-port", "0", "--http-port", "0", "--metrics-port", "0"])
            .args(args)
            .arg("--data-dir")
            .arg(&data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hourglass");
        let (lines, listening) = lines_until_listening(child.stdout.take().expect("stdout"));
        if !listening {
            let _ = child.kill();
            panic!("no listening line within {START_TIMEOUT:?}: {lines:#?}");
        }
        Started { child, lines, data_dir }
    }

    /// The port logged as `key=ADDR` (text format).
    fn port(&self, key: &str) -> u16 {
        let line = self.lines.iter().find(|l| l.contains("hourglass listening")).unwrap();
        let start = line.find(key).unwrap() + key.len();
        let addr = line[start..].split_whitespace().next().unwrap();
        addr.parse::<SocketAddr>().unwrap().port()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Stdout is a pipe, not a terminal: no ANSI escape bytes, and the restore report is fields,
/// not a `Debug` dump of a struct.
#[test]
fn logs_off_a_terminal_have_no_escape_bytes_or_debug_dumps() {
    let started = Started::new("ansi", &["--bind", "127.0.0.1"]);
    for line in &started.lines {
        assert!(!line.contains('\u{1b}'), "escape byte in {line:?}");
        assert!(!line.contains("Report {"), "Debug dump in {line:?}");
    }
    assert!(started.lines.iter().any(|l| l.contains("broker restored") && l.contains("queues=0")));
}

/// On a terminal (a pty from util-linux `script`) the text format has colours, and `NO_COLOR=1`
/// takes them away. Skipped where `script` is missing.
#[test]
fn no_color_is_honoured_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to give the broker a terminal");
        return;
    }
    let coloured = lines_on_a_terminal("tty", None);
    assert!(coloured.iter().any(|l| l.contains('\u{1b}')), "a terminal gets colours: {coloured:#?}");
    let plain = lines_on_a_terminal("nocolor", Some("1"));
    assert!(plain.iter().all(|l| !l.contains('\u{1b}')), "NO_COLOR=1 still coloured: {plain:#?}");
}

/// The broker's lines up to its listening line, its stdout a pty; the broker dies with the pty.
fn lines_on_a_terminal(tag: &str, no_color: Option<&str>) -> Vec<String> {
    let data_dir = fresh_dir(tag);
    let broker = format!(
        "exec {} --bind 127.0.0.1 --amqp-port 0 --http-port 0 --metrics-port 0 --data-dir {}",
        env!("CARGO_BIN_EXE_hourglass"),
        data_dir.display()
    );
    let mut command = Command::new("script");
    command.args(["-qfec", &broker, "/dev/null"]).env("RUST_LOG", "info").env_remove("NO_COLOR");
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("start script");
    let (lines, _) = lines_until_listening(child.stdout.take().expect("stdout"));
    let _ = child.kill();
    let _ = child.wait();
    // The broker gets SIGHUP when the pty closes; wait (bounded) for it to release the data dir.
    for _ in 0..LISTING_TRIES {
        if std::fs::remove_dir_all(&data_dir).is_ok() || !data_dir.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(lines.iter().any(|l| l.contains("hourglass listening")), "no listening line: {lines:#?}");
    lines
}

/// `--log-format json`: every line is a JSON object; the listening line carries the addresses.
#[test]
fn json_log_format_writes_json_lines() {
    let started = Started::new("json", &["--bind", "127.0.0.1", "--log-format", "json"]);
    for line in &started.lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(value["level"].is_string() && value["fields"]["message"].is_string(), "{line}");
    }
    let listening = started.lines.last().unwrap();
    let value: serde_json::Value = serde_json::from_str(listening).unwrap();
    assert!(value["fields"]["amqp"].as_str().unwrap().starts_with("127.0.0.1:"), "{listening}");
}

/// The default bind (no `--bind`) takes AMQP clients over IPv6 and IPv4 loopback on one port, and
/// names an IPv4 client as IPv4 (not `::ffff:127.0.0.1`). Skipped where the machine has no IPv6
/// loopback. (lapin's URI parser takes no `[::1]`, so the IPv6 side speaks the protocol header
/// itself and waits for connection.start.)
#[tokio::test]
async fn default_bind_serves_ipv4_and_ipv6() {
    if TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    }
    let started = Started::new("dual", &[]);
    let port = started.port("amqp=");
    assert_connection_start(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)));
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let connection =
        lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await.expect("connect");
    // The listing is the broker task's view, which learns of the connection just after open-ok.
    let wanted = "\"peer_host\":\"127.0.0.1\"";
    let mut body = String::new();
    for _ in 0..LISTING_TRIES {
        body = get_as_guest(started.port("http="), "/api/connections");
        if body.contains(wanted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(body.contains(wanted), "{body}");
    connection.close(200, "bye".into()).await.expect("close");
}

/// On the dual-stack listener, IPv4 clients of the HTTP API are counted per IPv4 address by the
/// failed-login slowdown, not together as one `::ffff:0:0/64` prefix: after escalating refusals
/// from 127.0.0.1, a first refusal from source address 127.0.0.2 is held only the first hold.
#[test]
fn ipv4_http_clients_on_the_dual_stack_listener_have_their_own_login_holds() {
    if TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    }
    let started = Started::new("dual-logins", &["--login-failure-delay-ms", "50"]);
    let port = started.port("http=");
    // 50 + 100 + 200 + 400 + 800 ms of holds for 127.0.0.1
    for _ in 0..5 {
        assert!(http_status_from([127, 0, 0, 1], port, "Z3Vlc3Q6d3Jvbmc=").contains(" 401 "));
    }
    let from_another_address = Instant::now();
    assert!(http_status_from([127, 0, 0, 2], port, "Z3Vlc3Q6d3Jvbmc=").contains(" 401 "));
    let held = from_another_address.elapsed();
    // Sharing 127.0.0.1's count would have held it 1.6 s.
    assert!(held < Duration::from_millis(1_000), "127.0.0.2's first refusal was held {held:?}");
}

/// A GET of /api/whoami from a socket bound to `ip` (the kernel would otherwise pick 127.0.0.1 as
/// the source of any loopback connection) with the Basic credentials `basic`; the status line.
fn http_status_from(ip: [u8; 4], port: u16, basic: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind((std::net::Ipv4Addr::from(ip), 0).into()).expect("bind source address");
        let mut stream = socket.connect((std::net::Ipv4Addr::LOCALHOST, port).into()).await.expect("connect http");
        let request = format!(
            "GET /api/whoami HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {basic}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("send http");
        let mut response = String::new();
        tokio::time::timeout(START_TIMEOUT, stream.read_to_string(&mut response))
            .await
            .expect("answered in time")
            .expect("read http");
        response.lines().next().unwrap_or_default().to_owned() + " "
    })
}

/// Sends AMQP 0-9-1's protocol header to `addr` and expects a method frame (connection.start).
fn assert_connection_start(addr: SocketAddr) {
    connection_start(addr);
}

/// A socket that sent the protocol header and read the first frame (connection.start), open.
fn connection_start(addr: SocketAddr) -> std::net::TcpStream {
    use std::io::Write;
    let mut socket = std::net::TcpStream::connect_timeout(&addr, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    socket.set_read_timeout(Some(START_TIMEOUT)).unwrap();
    socket.write_all(b"AMQP\x00\x00\x09\x01").expect("send protocol header");
    let mut frame_type = [0u8; 1];
    socket.read_exact(&mut frame_type).expect("read connection.start");
    assert_eq!(frame_type[0], 1, "a method frame from {addr}");
    socket
}

/// `hourglass --health-check` exits 0 for a running broker and 1 with one line when nothing
/// listens on the HTTP port.
#[test]
fn health_check_mode_answers() {
    let broker = RunningBroker::start();
    let port = broker.http.port().to_string();
    let status = hourglass()
        .args(["--health-check", "--bind", "127.0.0.1", "--http-port", &port])
        .status()
        .expect("run health check");
    assert!(status.success(), "{status:?}");
    drop(broker);
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut command = hourglass();
    command.args(["--health-check", "--bind", "127.0.0.1", "--http-port", &free]);
    let output = run_to_failure(command);
    assert_one_line_failure(&output, "cannot reach the management API");
}

/// With a disk alarm in effect (a free-space limit no disk meets) the health check fails: exit 1,
/// one line with the 503 of `/api/health/checks/local-alarms`.
#[test]
fn health_check_fails_while_an_alarm_is_in_effect() {
    let broker = RunningBroker::start_with(&["--disk-free-limit", "1000000000GB"]);
    let port = broker.http.port().to_string();
    // The alarm monitor takes its first sample just after start: poll, bounded.
    let mut output = None;
    for _ in 0..LISTING_TRIES {
        let mut command = hourglass();
        command.args(["--health-check", "--bind", "127.0.0.1", "--http-port", &port]);
        let run = run_to_failure_or_success(command);
        if !run.status.success() {
            output = Some(run);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = output.expect("the health check never failed under a disk alarm");
    assert_one_line_failure(&output, "answered 503");
}

fn run_to_failure_or_success(mut command: Command) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).output().expect("run health check")
}

/// A blocking HTTP GET as guest on 127.0.0.1; returns the whole response.
fn get_as_guest(port: u16, path: &str) -> String {
    use std::io::Write;
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect http");
    socket.set_read_timeout(Some(START_TIMEOUT)).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Connection: close\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).expect("send http");
    let mut response = String::new();
    socket.read_to_string(&mut response).expect("read http");
    response
}

/// `--worker-threads N` runs the broker on N runtime threads (ADR 0014: one spends the least
/// CPU per message), as its listening line says, and 0 is refused with one line.
#[test]
fn worker_threads_sets_the_runtime_threads() {
    for threads in ["1", "3"] {
        let started =
            Started::new(&format!("workers{threads}"), &["--bind", "127.0.0.1", "--worker-threads", threads]);
        let listening = started.lines.iter().find(|l| l.contains("hourglass listening")).unwrap();
        assert!(listening.contains(&format!("worker_threads={threads}")), "{listening}");
        assert_connection_start(SocketAddr::from(([127, 0, 0, 1], started.port("amqp="))));
    }
    let mut refused = hourglass();
    refused.args(["--bind", "127.0.0.1", "--worker-threads", "0"]);
    let output = run_to_failure(refused);
    assert_one_line_failure(&output, "worker_threads: at least 1 thread");
}
