//! A follower's replication listener: a leader connects, says its term, gets the follower's
//! manifest, sends the catch-up and then its live ops; the follower acknowledges each run of ops
//! once it is fsynced.
//!
//! Before anything else the leader proves itself (docs/clustering.md "Security model"): by the
//! cluster secret's challenge–response (`auth.rs`), every later frame sealed, or by its
//! certificate with `--replication-tls`. Only then does its claim of leader and term count, and
//! only if etcd names that leader at that term. Until then a socket is bounded: at most
//! [`UNAUTHENTICATED_SOCKETS_MAX`] at once and [`UNAUTHENTICATED_PER_ADDRESS_MAX`] from one
//! address (more are closed at once), [`HANDSHAKE_DEADLINE`] to
//! finish, frames of at most `frame::HANDSHAKE_FRAME_BYTES_MAX`.
//!
//! Fencing: the follower remembers the highest term it has seen (from leaders' hellos and from
//! etcd). Ops from a lower term are never applied or acknowledged, so a leader that was paused or
//! cut off and comes back cannot get anything confirmed: its stream is closed.

use std::collections::HashMap;
use std::io::{self, BufWriter, ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ring::rand::SystemRandom;

use crate::repl::apply::Applier;
use crate::repl::auth::{AuthError, ClusterSecret, FollowerAwaitingProof, Nonce};
use crate::repl::digests::FileDigests;
use crate::repl::frame::{Frame, FrameReader, FrameWriter};
use crate::repl::transport::{self, ReplicationTls};

/// Sockets on the replication port that have not yet authenticated, at most: a leader needs one
/// (two while an old link of its lingers), so 16 leaves room for every node of a large cluster
/// reconnecting at once, while a stranger's flood costs at most 16 threads and 48 descriptors
/// (issue #21: 6,800 idle sockets had filled a follower's descriptor table). Beyond it, new
/// sockets are closed at once; each held one is closed at [`HANDSHAKE_DEADLINE`].
pub const UNAUTHENTICATED_SOCKETS_MAX: usize = 16;
/// Of those, from one address at most: a leader dials from one address and needs one socket (two
/// while an old link of its lingers), so 4 is room to spare — and a stranger on one host cannot
/// take every place and keep a new leader out; it would need four hosts.
pub const UNAUTHENTICATED_PER_ADDRESS_MAX: usize = 4;
/// How long a new socket has to authenticate, TLS handshake included: a leader needs two round
/// trips and two HMACs, milliseconds even across a WAN; 5 s is the HTTP listeners' request
/// timeout too (`DEFAULT_HTTP_REQUEST_TIMEOUT_MS`).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Refused handshakes and full-port closes are logged at warn at most this often (the rest at
/// debug): a stranger must not be able to flood the log.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How often blocked reads and the accept loop look at the stop flag and the fence.
const POLL: Duration = Duration::from_millis(200);

/// A follower streaming without pause still acknowledges (and fsyncs) at least this often.
const ACK_EVERY_OPS: usize = 256;

/// The highest term this node has seen, and the leader etcd names for it: a stream from a lower
/// term, or from anyone but that leader, is refused.
#[derive(Debug, Default)]
pub struct Fence {
    max_term: AtomicU64,
    leader: Mutex<Option<(String, u64)>>,
    /// The leader and term whose stream to this node ended by end of file or a reset, not yet
    /// looked at by the coordinator (`dead_leader.rs`).
    ended: Mutex<Option<(String, u64)>>,
}

impl Fence {
    /// etcd names `leader` at `term` (the coordinator saw it): records the term, and only that
    /// leader's stream is taken from now on.
    pub fn leader_seen(&self, leader: &str, term: u64) {
        if self.admit(term) {
            *self.leader.lock().unwrap_or_else(|p| p.into_inner()) = Some((leader.to_owned(), term));
        }
    }

    /// Whether a stream saying it comes from `leader` at `term` is the one etcd names.
    pub fn is_named_leader(&self, leader: &str, term: u64) -> bool {
        let named = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        named.as_ref().is_some_and(|(name, t)| name == leader && *t == term) && self.current(term)
    }

    /// Records `term`; whether a leader of that term may still write here.
    pub fn admit(&self, term: u64) -> bool {
        self.max_term.fetch_max(term, Ordering::SeqCst) <= term
    }

    /// Whether `term` is still the newest seen.
    pub fn current(&self, term: u64) -> bool {
        self.max_term.load(Ordering::SeqCst) == term
    }

    pub fn max_term(&self) -> u64 {
        self.max_term.load(Ordering::SeqCst)
    }

    /// The stream of `leader` at `term` ended as a dead process's does (end of file, a reset).
    pub fn stream_ended(&self, leader: &str, term: u64) {
        *self.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some((leader.to_owned(), term));
    }

    /// The stream that ended since the last call, if any.
    pub fn take_ended_stream(&self) -> Option<(String, u64)> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// How leaders must prove themselves to this follower: at least one of the two.
#[derive(Clone, Debug)]
pub struct ReplicationAuth {
    /// This node's name: a secret hello must be addressed to it.
    pub node: String,
    /// The cluster secret's challenge–response and sealed frames (`--cluster-secret-file`).
    pub secret: Option<ClusterSecret>,
    /// Mutual TLS (`--replication-tls`).
    pub tls: Option<ReplicationTls>,
}

/// The follower's replication state, shared by its listener and the node.
pub struct Follower {
    pub fence: Arc<Fence>,
    applier: Mutex<Applier>,
    stop: AtomicBool,
    auth: ReplicationAuth,
    rng: SystemRandom,
    /// Sockets accepted and not yet authenticated (see [`UNAUTHENTICATED_SOCKETS_MAX`]).
    unauthenticated: Arc<Mutex<Places>>,
    last_warned: Mutex<Option<Instant>>,
}

impl Follower {
    /// A follower of data directory `dir`; refused without a secret or TLS (anyone could stream).
    pub fn new(
        dir: PathBuf,
        fence: Arc<Fence>,
        auth: ReplicationAuth,
        digests: Arc<FileDigests>,
    ) -> io::Result<Arc<Follower>> {
        if auth.secret.is_none() && auth.tls.is_none() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "replication needs a cluster secret or replication TLS",
            ));
        }
        Ok(Arc::new(Follower {
            auth,
            fence,
            applier: Mutex::new(Applier::new(dir, digests)?),
            stop: AtomicBool::new(false),
            rng: SystemRandom::new(),
            unauthenticated: Arc::default(),
            last_warned: Mutex::new(None),
        }))
    }

    /// Stops applying for good (the node is becoming leader at `term`): on return no leader
    /// stream writes another byte.
    pub fn stop(&self, term: u64) {
        self.fence.admit(term);
        self.stop.store(true, Ordering::SeqCst);
        let mut applier = self.applier.lock().unwrap_or_else(|p| p.into_inner());
        let _ = applier.close();
    }

    /// Accepts leaders on `listener` until [`Follower::stop`].
    pub fn serve(self: Arc<Self>, listener: TcpListener) {
        if listener.set_nonblocking(true).is_err() {
            return;
        }
        while !self.stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let Some(slot) = Slot::take(&self.unauthenticated, peer.ip()) else {
                        drop(stream);
                        self.warn_limited(|| {
                            tracing::warn!(%peer, cap = UNAUTHENTICATED_SOCKETS_MAX, per_address = UNAUTHENTICATED_PER_ADDRESS_MAX, "replication port: too many unauthenticated sockets; closing new ones")
                        });
                        continue;
                    };
                    let follower = self.clone();
                    let _ =
                        std::thread::Builder::new().name("hg-repl-in".into()).spawn(move || {
                            match follower.session(stream, slot) {
                                Err(error) if error.kind() == ErrorKind::PermissionDenied => follower
                                    .warn_limited(
                                        || tracing::warn!(%peer, %error, "refused a replication stream"),
                                    ),
                                Err(error) => tracing::debug!(%peer, %error, "replication stream ended"),
                                Ok(()) => {}
                            }
                        });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL / 4),
                Err(error) => {
                    tracing::warn!(%error, "replication accept failed");
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    /// One connection: authenticate within the deadline (holding `slot` until then), check the
    /// fence, then apply the stream.
    fn session(&self, stream: TcpStream, slot: Slot) -> io::Result<()> {
        let deadline = Instant::now() + HANDSHAKE_DEADLINE;
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(HANDSHAKE_DEADLINE))?;
        let duplex = transport::accept(stream, self.auth.tls.as_ref(), deadline)?;
        let mut reader = FrameReader::new(duplex.read);
        let mut writer = FrameWriter::new(BufWriter::new(duplex.write));
        let (leader, term) = self.authenticate(&duplex.socket, &mut reader, &mut writer, deadline)?;
        drop(slot);
        duplex.socket.set_read_timeout(Some(POLL))?;
        duplex.socket.set_write_timeout(None)?;
        if !self.fence.is_named_leader(&leader, term) || self.stop.load(Ordering::SeqCst) {
            // An old leader back from a pause, a new one this node has not seen in etcd yet (it
            // retries), or not a leader at all.
            tracing::info!(%leader, term, newest = self.fence.max_term(), "refused a replication stream: not the leader etcd names");
            return Ok(());
        }
        tracing::info!(%leader, term, "replicating from the leader");
        let streamed = self.stream(&leader, term, &mut reader, &mut writer);
        if let Err(error) = &streamed {
            let closed = matches!(
                error.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            );
            if closed && self.fence.current(term) && !self.stop.load(Ordering::SeqCst) {
                self.fence.stream_ended(&leader, term);
            }
        }
        streamed
    }

    /// The leader's stream after the handshake: the manifest, then ops applied and acknowledged.
    fn stream(&self, leader: &str, term: u64, reader: &mut Reader, writer: &mut Writer) -> io::Result<()> {
        {
            let applier = self.applier.lock().unwrap_or_else(|p| p.into_inner());
            writer.send(&Frame::Manifest(applier.manifest()?))?;
            writer.flush()?;
        }
        let mut caught_up = false;
        let mut last_seq = 0;
        let mut unacked = 0usize;
        loop {
            let frame = self.next_frame(reader)?;
            let mut applier = self.applier.lock().unwrap_or_else(|p| p.into_inner());
            if !self.fence.current(term) || self.stop.load(Ordering::SeqCst) {
                tracing::info!(%leader, term, "a newer term took over: closing this replication stream");
                return Ok(());
            }
            match frame {
                Frame::Op { seq, op } => {
                    applier.apply(&op)?;
                    unacked += 1;
                    last_seq = last_seq.max(seq);
                }
                Frame::CaughtUp { seq } => {
                    caught_up = true;
                    last_seq = seq;
                }
                // Answered below with an Ack of what is held (nothing new to sync when idle).
                Frame::Heartbeat => {}
                _ => return Err(std::io::Error::new(ErrorKind::InvalidData, "unexpected frame")),
            }
            // Acknowledge once the leader has paused (no whole frame buffered): one fsync per run,
            // and at least every ACK_EVERY_OPS ops while it streams without a pause.
            if caught_up && (!reader.has_frame() || unacked >= ACK_EVERY_OPS) {
                if unacked > 0 {
                    applier.sync()?;
                }
                unacked = 0;
                drop(applier);
                writer.send(&Frame::Ack { seq: last_seq })?;
                writer.flush()?;
            }
        }
    }

    /// The leader's proof of itself: the leader and term it has proven (with a secret) or that a
    /// cluster member claims (TLS only). Then `reader` and `writer` are set for the stream.
    fn authenticate(
        &self,
        socket: &TcpStream,
        reader: &mut Reader,
        writer: &mut Writer,
        deadline: Instant,
    ) -> io::Result<(String, u64)> {
        let Some(secret) = &self.auth.secret else {
            // Replication TLS alone: the certificate proved the peer a member of the cluster.
            return match self.handshake_frame(socket, reader, deadline)? {
                Frame::Hello { term, leader } => {
                    reader.authenticated(None);
                    Ok((leader, term))
                }
                _ => Err(refused("expected the leader's hello")),
            };
        };
        let hello = match self.handshake_frame(socket, reader, deadline)? {
            Frame::AuthHello(hello) => hello,
            // The pre-#21 hello, a stranger's, or a node started without the secret.
            _ => {
                return Err(refused(
                    "expected an authenticated hello (is the cluster secret set on the leader?)",
                ))
            }
        };
        let nonce = Nonce::random(&self.rng).map_err(denied)?;
        let (waiting, challenge) =
            FollowerAwaitingProof::handle_hello(secret, &self.auth.node, hello, nonce).map_err(denied)?;
        writer.send(&Frame::AuthChallenge(challenge))?;
        writer.flush()?;
        let proof = match self.handshake_frame(socket, reader, deadline)? {
            Frame::AuthProof(proof) => proof,
            _ => return Err(refused("expected the leader's proof")),
        };
        let proven = waiting.handle_proof(&proof).map_err(denied)?;
        reader.authenticated(Some(proven.keys.open));
        writer.seal_with(proven.keys.seal);
        Ok((proven.leader, proven.term))
    }

    /// The next handshake frame before `deadline`: one read at a time, so a peer trickling bytes
    /// cannot stretch it.
    fn handshake_frame(
        &self,
        socket: &TcpStream,
        reader: &mut Reader,
        deadline: Instant,
    ) -> io::Result<Frame> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(ErrorKind::TimedOut, "no handshake within the deadline"));
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(io::Error::new(ErrorKind::Interrupted, "follower stopped"));
            }
            socket.set_read_timeout(Some(left.min(POLL)))?;
            if let Some(frame) = reader.read_once()? {
                return Ok(frame);
            }
        }
    }

    /// Runs `warn` at most once per [`WARN_EVERY`].
    fn warn_limited(&self, warn: impl FnOnce()) {
        let mut last = self.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
            *last = Some(now);
            warn();
        }
    }

    /// The next frame, waiting through read timeouts unless the follower stops.
    fn next_frame(&self, reader: &mut Reader) -> io::Result<Frame> {
        loop {
            if let Some(frame) = reader.next_frame()? {
                return Ok(frame);
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(std::io::Error::new(ErrorKind::Interrupted, "follower stopped"));
            }
        }
    }
}

type Reader = FrameReader<Box<dyn Read + Send>>;
type Writer = FrameWriter<BufWriter<Box<dyn Write + Send>>>;

/// One of the [`UNAUTHENTICATED_SOCKETS_MAX`] places on the port, given back when dropped.
struct Slot {
    places: Arc<Mutex<Places>>,
    address: IpAddr,
}

/// The places taken: in all, and by each address (at most [`UNAUTHENTICATED_SOCKETS_MAX`]
/// entries, so the map stays small).
#[derive(Debug, Default)]
struct Places {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl Slot {
    /// A place for a socket from `address`, if neither cap is reached.
    fn take(places: &Arc<Mutex<Places>>, address: IpAddr) -> Option<Slot> {
        let mut taken = places.lock().unwrap_or_else(|p| p.into_inner());
        let from_address = taken.by_address.get(&address).copied().unwrap_or(0);
        if taken.total >= UNAUTHENTICATED_SOCKETS_MAX || from_address >= UNAUTHENTICATED_PER_ADDRESS_MAX {
            return None;
        }
        taken.total += 1;
        *taken.by_address.entry(address).or_default() += 1;
        Some(Slot { places: places.clone(), address })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self.places.lock().unwrap_or_else(|p| p.into_inner());
        taken.total -= 1;
        if let Some(count) = taken.by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                taken.by_address.remove(&self.address);
            }
        }
    }
}

/// A handshake the peer got wrong: logged as a refusal.
fn refused(what: &str) -> io::Error {
    io::Error::new(ErrorKind::PermissionDenied, what.to_owned())
}

fn denied(error: AuthError) -> io::Error {
    io::Error::new(ErrorKind::PermissionDenied, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The port holds at most the cap of unauthenticated sockets, and a few per address, so a
    /// stranger on one host leaves room for the leader; a place comes back when its socket
    /// authenticates or ends.
    #[test]
    fn unauthenticated_sockets_are_capped_in_all_and_per_address_and_places_come_back() {
        let places = Arc::new(Mutex::new(Places::default()));
        let address = |i: usize| IpAddr::from([10, 0, 0, i as u8]);
        let stranger: Vec<Slot> = (0..10).map_while(|_| Slot::take(&places, address(66))).collect();
        assert_eq!(stranger.len(), UNAUTHENTICATED_PER_ADDRESS_MAX, "one host gets only its share");
        assert!(Slot::take(&places, address(1)).is_some(), "the leader still gets in");
        let others: Vec<Slot> =
            (0..UNAUTHENTICATED_SOCKETS_MAX).filter_map(|i| Slot::take(&places, address(100 + i))).collect();
        assert_eq!(
            stranger.len() + others.len(),
            UNAUTHENTICATED_SOCKETS_MAX,
            "the temporary leader slot was dropped"
        );
        assert!(Slot::take(&places, address(1)).is_none(), "beyond the cap, closed at once");
        drop((stranger, others));
        let left = places.lock().unwrap();
        assert_eq!((left.total, left.by_address.len()), (0, 0));
        drop(left);
        assert!(Slot::take(&places, address(66)).is_some());
    }

    /// A follower of a fresh directory on loopback, following n1 at term 5 with `secret`.
    fn follower(secret: &ClusterSecret) -> (tempfile::TempDir, Arc<Follower>, std::net::SocketAddr) {
        let dir = tempfile::tempdir().unwrap();
        let fence = Arc::new(Fence::default());
        fence.leader_seen("n1", 5);
        let auth = ReplicationAuth { node: "n2".into(), secret: Some(secret.clone()), tls: None };
        let follower = Follower::new(dir.path().to_owned(), fence, auth, Arc::default()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let serving = follower.clone();
        std::thread::spawn(move || serving.serve(listener));
        (dir, follower, address)
    }

    /// Runs the leader's side of the handshake with `secret` over a socket; the follower's first
    /// frame after it, or the error.
    fn lead_with(address: std::net::SocketAddr, secret: &ClusterSecret) -> io::Result<Option<Frame>> {
        use crate::repl::auth::LeaderAwaitingChallenge;
        let socket = TcpStream::connect(address)?;
        socket.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reader = FrameReader::new(socket.try_clone()?);
        let mut writer = FrameWriter::new(socket.try_clone()?);
        let nonce = Nonce::random(&SystemRandom::new()).unwrap();
        let (waiting, hello) = LeaderAwaitingChallenge::start(secret, "n1", "n2", 5, nonce).unwrap();
        writer.send(&Frame::AuthHello(hello))?;
        let Some(Frame::AuthChallenge(challenge)) = reader.next_frame()? else {
            return Err(io::Error::new(ErrorKind::InvalidData, "no challenge"));
        };
        let (proof, keys) = waiting.handle_challenge(&challenge).map_err(denied)?;
        writer.send(&Frame::AuthProof(proof))?;
        reader.authenticated(Some(keys.open));
        reader.next_frame()
    }

    /// The leader etcd names, holding the secret, gets the (sealed) manifest; a leader with
    /// another secret learns the follower is not of its cluster and gets nothing.
    #[test]
    fn only_a_leader_holding_the_secret_gets_the_manifest() {
        let secret = ClusterSecret::from_bytes(b"the cluster's shared secret").unwrap();
        let (_dir, follower, address) = follower(&secret);
        assert!(matches!(lead_with(address, &secret), Ok(Some(Frame::Manifest(_)))));
        let other = ClusterSecret::from_bytes(b"some other cluster's secret").unwrap();
        let refused = lead_with(address, &other).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");
        follower.stop(6);
    }

    /// The pre-#21 hello, the leader's name and term in the clear, gets the socket closed with
    /// nothing sent back.
    #[test]
    fn the_old_unauthenticated_hello_is_refused() {
        let secret = ClusterSecret::from_bytes(b"the cluster's shared secret").unwrap();
        let (_dir, follower, address) = follower(&secret);
        let mut socket = TcpStream::connect(address).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        crate::repl::frame::write_frame(&mut socket, &Frame::Hello { term: 5, leader: "n1".into() }).unwrap();
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer);
        assert!(answer.is_empty(), "{answer:?}");
        follower.stop(6);
    }

    #[test]
    fn a_lower_term_is_refused_once_a_higher_one_was_seen() {
        let fence = Fence::default();
        assert!(fence.admit(5));
        assert!(fence.admit(5), "the same leader reconnecting");
        assert!(fence.admit(9));
        assert!(!fence.admit(5), "the old leader, back from a pause");
        assert!(!fence.current(5) && fence.current(9));
    }

    #[test]
    fn only_the_leader_etcd_names_at_its_term_may_stream() {
        let fence = Fence::default();
        assert!(!fence.is_named_leader("n1", 5), "nobody named yet");
        fence.leader_seen("n1", 5);
        assert!(fence.is_named_leader("n1", 5));
        assert!(!fence.is_named_leader("n1", 6) && !fence.is_named_leader("mallory", 5));
        fence.leader_seen("n2", 9);
        assert!(!fence.is_named_leader("n1", 5), "n1's term is over");
        fence.leader_seen("n1", 5);
        assert!(fence.is_named_leader("n2", 9), "an older sighting does not bring n1 back");
    }
}
