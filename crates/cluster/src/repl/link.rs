//! The leader's link to one follower: dial, prove itself and check the follower (the cluster
//! secret's challenge–response, `auth.rs`, or mutual TLS), read the follower's manifest,
//! send the catch-up (what its files lack, as of the registration point), then stream every later
//! op; a second thread reads the follower's acknowledgements into the [`Hub`]. Any error drops
//! the link and it starts over after a pause, catching up again from the files.

use std::io::{self, BufWriter, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ring::rand::SystemRandom;

use crate::repl::auth::{ClusterSecret, LeaderAwaitingChallenge, Nonce};
use crate::repl::frame::{FileOp, Frame, FrameReader, FrameWriter, WRITE_CHUNK_MAX};
use crate::repl::hub::{Hub, Registration};
use crate::repl::manifest::{plan_catch_up, LeaderFile, Step};
use crate::repl::receiver::HANDSHAKE_DEADLINE;
use crate::repl::transport::{self, ReplicationTls};

type Writer = FrameWriter<BufWriter<Box<dyn Write + Send>>>;
type Reader = FrameReader<Box<dyn std::io::Read + Send>>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RETRY_PAUSE: Duration = Duration::from_millis(300);
/// How long the follower may take to send its manifest (it digests every file).
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(60);
/// A follower that takes no bytes this long (stopped, its window full) is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(200);
/// A streaming link with no op to send for this long sends a heartbeat (the follower answers
/// with an ack): the leader hears from every follower at least this often, or knows it cannot
/// ([`crate::in_sync::Progress::reachable`]).
const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// Who the link is for and whom it speaks for.
#[derive(Clone, Debug)]
pub struct LinkTarget {
    pub follower: String,
    /// `host:port` of the follower's replication listener.
    pub address: String,
    /// The follower's advertised host: with replication TLS, its certificate must name it.
    pub host: String,
    /// Mutual TLS for the stream (`--replication-tls`).
    pub tls: Option<ReplicationTls>,
    /// The cluster secret: the handshake and sealed frames (`--cluster-secret-file`).
    pub secret: Option<ClusterSecret>,
    pub leader: String,
    pub term: u64,
    pub data_dir: PathBuf,
}

/// Runs the link until `stop` is set (the follower left, or this node is no longer leader).
pub fn run_link(hub: Arc<Hub>, target: LinkTarget, stop: Arc<AtomicBool>) {
    let mut last_refusal = None;
    while !stop.load(Ordering::SeqCst) {
        match connect(&target.address).and_then(|stream| session(&hub, &target, stream, &stop)) {
            Ok(()) => {}
            // A follower that fails authentication (another secret) is worth a warning, once
            // per distinct reason, not every retry.
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                let reason = error.to_string();
                if last_refusal.as_ref() != Some(&reason) {
                    tracing::warn!(follower = %target.follower, %error, "replication link refused");
                    last_refusal = Some(reason);
                }
            }
            Err(error) => tracing::debug!(follower = %target.follower, %error, "replication link down"),
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}

fn connect(address: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{address} resolves to nothing"));
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn session(hub: &Arc<Hub>, target: &LinkTarget, stream: TcpStream, stop: &AtomicBool) -> io::Result<()> {
    let deadline = Instant::now() + HANDSHAKE_DEADLINE;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    stream.set_read_timeout(Some(HANDSHAKE_DEADLINE))?;
    let duplex = transport::connect(stream, &target.host, target.tls.as_ref(), deadline)?;
    let stream = duplex.socket;
    let mut writer = FrameWriter::new(BufWriter::with_capacity(1 << 20, duplex.write));
    let mut reader = FrameReader::new(duplex.read);
    authenticate(target, &mut reader, &mut writer)?;
    stream.set_read_timeout(Some(MANIFEST_TIMEOUT))?;
    let manifest = match reader.next_frame()? {
        Some(Frame::Manifest(files)) => files,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "expected the follower's manifest")),
    };
    let registration = hub.register(&target.follower)?;
    let link_id = registration.link_id;
    let acks = spawn_ack_reader(hub.clone(), target.follower.clone(), link_id, reader, stream.try_clone()?);
    let result = stream_to(hub, target, registration, &manifest, &mut writer, stop);
    hub.disconnect(&target.follower, link_id);
    let _ = stream.shutdown(Shutdown::Both);
    let _ = acks.join();
    result
}

/// Proves this leader to the follower and checks the follower's proof (with a secret; then
/// every later frame is sealed), or says hello inside mutual TLS (without one).
fn authenticate(target: &LinkTarget, reader: &mut Reader, writer: &mut Writer) -> io::Result<()> {
    let Some(secret) = &target.secret else {
        writer.send(&Frame::Hello { term: target.term, leader: target.leader.clone() })?;
        reader.authenticated(None);
        return writer.flush();
    };
    let denied = |e| io::Error::new(io::ErrorKind::PermissionDenied, e);
    let nonce = Nonce::random(&SystemRandom::new()).map_err(denied)?;
    let (waiting, hello) =
        LeaderAwaitingChallenge::start(secret, &target.leader, &target.follower, target.term, nonce)
            .map_err(denied)?;
    writer.send(&Frame::AuthHello(hello))?;
    writer.flush()?;
    let challenge = match reader.next_frame()? {
        Some(Frame::AuthChallenge(challenge)) => challenge,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "expected the follower's challenge")),
    };
    let (proof, keys) = waiting.handle_challenge(&challenge).map_err(denied)?;
    writer.send(&Frame::AuthProof(proof))?;
    writer.seal_with(keys.seal);
    reader.authenticated(Some(keys.open));
    writer.flush()
}

fn stream_to(
    hub: &Hub,
    target: &LinkTarget,
    registration: Registration,
    manifest: &[crate::repl::frame::FileDigest],
    writer: &mut Writer,
    stop: &AtomicBool,
) -> io::Result<()> {
    let leader_files: Vec<LeaderFile> = registration.files.iter().map(|(file, _)| file.clone()).collect();
    let progress = || hub.link_progress(&target.follower, registration.link_id);
    let steps = plan_catch_up(&leader_files, manifest, |path, len| {
        progress();
        if let Some((_, Some(content))) = registration.files.iter().find(|(f, _)| f.path == path) {
            return Ok(crc32c::crc32c(&content[..(len as usize).min(content.len())]));
        }
        match hub.digests.prefix_crc(path, &target.data_dir.join(path), len) {
            Ok(crc) => Ok(crc),
            // Compacted away since: whatever the follower has is replaced (then removed by the op).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(!0),
            Err(e) => Err(e),
        }
    })?;
    for step in steps {
        send_step(&target.data_dir, &registration, step, writer, &progress)?;
    }
    writer.send(&Frame::CaughtUp { seq: registration.after_seq })?;
    writer.flush()?;
    tracing::info!(follower = %target.follower, at = registration.after_seq, "follower caught up from the files; streaming");
    let mut last_sent = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let (seq, op) = match registration.ops.recv_timeout(POLL.min(HEARTBEAT_EVERY)) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => {
                if last_sent.elapsed() >= HEARTBEAT_EVERY {
                    writer.send(&Frame::Heartbeat)?;
                    writer.flush()?;
                    last_sent = Instant::now();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "dropped by the hub (too far behind)"))
            }
        };
        let taken = |op: &FileOp| registration.queued_bytes.fetch_sub(op.weight(), Ordering::Relaxed);
        taken(&op);
        writer.send(&Frame::Op { seq, op: (*op).clone() })?;
        for (seq, op) in registration.ops.try_iter() {
            taken(&op);
            writer.send(&Frame::Op { seq, op: (*op).clone() })?;
        }
        writer.flush()?;
        last_sent = Instant::now();
    }
}

/// One catch-up step as ops with sequence 0; `progress` is told after every chunk the follower
/// took (a catch-up of gigabytes is a link making progress, not a silent follower).
fn send_step(
    dir: &Path,
    registration: &Registration,
    step: Step,
    writer: &mut Writer,
    progress: &dyn Fn(),
) -> io::Result<()> {
    let (path, from, to, replace) = match step {
        Step::Remove { path } => return writer.send(&Frame::Op { seq: 0, op: FileOp::Remove { path } }),
        Step::Send { path, from, to, replace } => (path, from, to, replace),
    };
    if replace {
        writer.send(&Frame::Op { seq: 0, op: FileOp::SetLen { path: path.clone(), len: 0 } })?;
    }
    let content = registration.files.iter().find(|(f, _)| f.path == path).and_then(|(_, c)| c.clone());
    let file = match &content {
        Some(_) => None,
        None => match std::fs::File::open(dir.join(&path)) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        },
    };
    let mut offset = from;
    while offset < to {
        let n = ((to - offset) as usize).min(WRITE_CHUNK_MAX);
        let data = match (&content, &file) {
            (Some(content), _) => content.slice(offset as usize..offset as usize + n),
            (None, Some(file)) => {
                let mut buf = vec![0u8; n];
                file.read_exact_at(&mut buf, offset)?;
                Bytes::from(buf)
            }
            (None, None) => return Ok(()),
        };
        writer.send(&Frame::Op { seq: 0, op: FileOp::Write { path: path.clone(), offset, data } })?;
        offset += n as u64;
        progress();
    }
    Ok(())
}

fn spawn_ack_reader(
    hub: Arc<Hub>,
    follower: String,
    link_id: u64,
    mut reader: Reader,
    stream: TcpStream,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = stream.set_read_timeout(Some(POLL));
        loop {
            match reader.next_frame() {
                Ok(Some(Frame::Ack { seq })) => hub.ack(&follower, link_id, seq, true),
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => {}
            }
        }
        hub.disconnect(&follower, link_id);
        let _ = stream.shutdown(Shutdown::Both);
    })
}
