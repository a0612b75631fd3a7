//! A follower's replication listener: a leader connects, says its term, gets the follower's
//! manifest, sends the catch-up and then its live ops; the follower acknowledges each run of ops
//! once it is fsynced.
//!
//! Fencing: the follower remembers the highest term it has seen (from leaders' hellos and from
//! etcd). Ops from a lower term are never applied or acknowledged, so a leader that was paused or
//! cut off and comes back cannot get anything confirmed: its stream is closed.

use std::io::{BufWriter, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::repl::apply::Applier;
use crate::repl::frame::{write_frame, Frame, FrameReader};
use crate::repl::manifest::local_manifest;
use crate::repl::transport::{self, ReplicationTls};

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
}

/// The follower's replication state, shared by its listener and the node.
pub struct Follower {
    pub fence: Arc<Fence>,
    applier: Mutex<Applier>,
    stop: AtomicBool,
    /// Mutual TLS for leaders' streams (`--replication-tls`).
    tls: Option<ReplicationTls>,
}

impl Follower {
    pub fn new(
        dir: PathBuf,
        fence: Arc<Fence>,
        tls: Option<ReplicationTls>,
    ) -> std::io::Result<Arc<Follower>> {
        Ok(Arc::new(Follower {
            tls,
            fence,
            applier: Mutex::new(Applier::new(dir)?),
            stop: AtomicBool::new(false),
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
                    let follower = self.clone();
                    let _ = std::thread::Builder::new().name("hg-repl-in".into()).spawn(move || {
                        if let Err(error) = follower.session(stream) {
                            tracing::debug!(%peer, %error, "replication stream ended");
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

    fn session(&self, stream: TcpStream) -> std::io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        let duplex = transport::accept(stream, self.tls.as_ref())?;
        duplex.socket.set_read_timeout(Some(POLL))?;
        let mut reader = FrameReader::new(duplex.read);
        let mut writer = BufWriter::new(duplex.write);
        let (term, leader) = match self.next_frame(&mut reader)? {
            Frame::Hello { term, leader } => (term, leader),
            _ => return Err(std::io::Error::new(ErrorKind::InvalidData, "expected hello")),
        };
        if !self.fence.is_named_leader(&leader, term) || self.stop.load(Ordering::SeqCst) {
            // An old leader back from a pause, a new one this node has not seen in etcd yet (it
            // retries), or not a leader at all.
            tracing::info!(%leader, term, newest = self.fence.max_term(), "refused a replication stream: not the leader etcd names");
            return Ok(());
        }
        tracing::info!(%leader, term, "replicating from the leader");
        {
            let applier = self.applier.lock().unwrap_or_else(|p| p.into_inner());
            write_frame(&mut writer, &Frame::Manifest(local_manifest(applier.dir())?))?;
            writer.flush()?;
        }
        let mut caught_up = false;
        let mut last_seq = 0;
        let mut unacked = 0usize;
        loop {
            let frame = self.next_frame(&mut reader)?;
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
                _ => return Err(std::io::Error::new(ErrorKind::InvalidData, "unexpected frame")),
            }
            // Acknowledge once the leader has paused (no whole frame buffered): one fsync per run,
            // and at least every ACK_EVERY_OPS ops while it streams without a pause.
            if caught_up && (!reader.has_frame() || unacked >= ACK_EVERY_OPS) {
                unacked = 0;
                applier.sync()?;
                drop(applier);
                write_frame(&mut writer, &Frame::Ack { seq: last_seq })?;
                writer.flush()?;
            }
        }
    }

    /// The next frame, waiting through read timeouts unless the follower stops.
    fn next_frame(&self, reader: &mut FrameReader<Box<dyn std::io::Read + Send>>) -> std::io::Result<Frame> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
