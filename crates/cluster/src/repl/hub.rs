//! The leader's replication state, one owner for it: the op sequence, what each follower has
//! acknowledged, which followers are in sync, and whether a sync may complete.
//!
//! The rule a confirm waits for (docs/clustering.md "What a confirm means",
//! [`crate::in_sync::may_confirm`]): the record is on the leader's disk, **every** follower of the
//! hub's in-sync set and of the set etcd records has acknowledged it (fsynced), the hub's set with
//! the leader numbers at least `min_in_sync`, and the leader's lease holds by its own clock
//! ([`crate::lease`]). A follower leaves the hub's set only after the coordinator has written
//! the smaller set to etcd (so it can no longer be elected). It joins the hub's set first (so
//! nothing is confirmed without it from then on), then etcd's.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::in_sync::{may_confirm, Progress, Replicas};
use crate::repl::digests::FileDigests;
use crate::repl::frame::FileOp;
use crate::repl::manifest::{valid_path, LeaderFile, MESSAGES_DIR};

/// How often a waiting sync re-checks whether it was deposed, even without an ack.
const WAIT_TICK: Duration = Duration::from_millis(100);
/// Ops queued for one follower at most, and their bytes: past either (a follower far behind)
/// its link is dropped and it catches up from the files instead of from memory. 256 MiB is
/// seconds of the fastest publishing; a slower follower is better served by the files.
const FOLLOWER_QUEUE_OPS_MAX: usize = 65_536;
const FOLLOWER_QUEUE_BYTES_MAX: usize = 256 << 20;

/// A follower's link as registered: the op sequence it starts after, the leader's files at that
/// point (small files with their content), and the ops that follow.
pub struct Registration {
    pub after_seq: u64,
    pub files: Vec<(LeaderFile, Option<Bytes>)>,
    pub ops: Receiver<(u64, Arc<FileOp>)>,
    pub link_id: u64,
    /// Bytes queued in `ops`: the link subtracts each op's [`FileOp::weight`] as it takes it.
    pub queued_bytes: Arc<AtomicUsize>,
}

/// What the cluster status shows of one follower.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerStatus {
    pub name: String,
    /// Replicated ops the follower has not acknowledged yet (0 too for a follower this leader
    /// has not heard from, and during a catch-up from the files while no op was sequenced).
    pub lag_records: u64,
    /// In the hub's set: caught up with this leader, and every confirm waits for it from now on
    /// (etcd records it once the coordinator's next round writes the set).
    pub in_sync: bool,
}

struct Link {
    id: u64,
    queue: SyncSender<(u64, Arc<FileOp>)>,
    queued_bytes: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Follower {
    link: Option<Link>,
    progress: Progress,
}

impl Follower {
    fn drop_link(&mut self) {
        self.link = None;
        self.progress.on_disconnect();
    }
}

struct State {
    last_seq: u64,
    followers: BTreeMap<String, Follower>,
    in_sync: BTreeSet<String>,
    /// The in-sync set etcd records (the leader left out): nodes that may win the next election;
    /// `None` before a new cluster's first set is written.
    recorded: Option<BTreeSet<String>>,
    min_in_sync: usize,
    deposed: bool,
    /// From this instant the leader's lease may have expired ([`crate::lease`]); `None`: not
    /// gated (a hub without a coordinator, in tests).
    lease_until: Option<Instant>,
    next_link: u64,
}

/// Shared by the storage wrappers (writers), the follower links and the coordinator.
pub struct Hub {
    data_dir: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
    /// What this node knows of its files' contents (`digests.rs`): kept up to date by the
    /// replicated storage's changes, read by catch-ups.
    pub digests: Arc<FileDigests>,
}

impl Hub {
    /// A hub for the leader of data directory `data_dir`, with no follower in sync yet, elected
    /// against the recorded set `recorded` (the leader left out; `None`: a new cluster): until
    /// etcd records another set, those nodes acknowledge every confirm too.
    pub fn new(
        data_dir: PathBuf,
        min_in_sync: usize,
        recorded: Option<BTreeSet<String>>,
        digests: Arc<FileDigests>,
    ) -> Arc<Hub> {
        Arc::new(Hub {
            data_dir,
            digests,
            state: Mutex::new(State {
                last_seq: 0,
                followers: BTreeMap::new(),
                in_sync: BTreeSet::new(),
                recorded,
                min_in_sync: min_in_sync.max(1),
                deposed: false,
                lease_until: None,
                next_link: 1,
            }),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs the local file operation and, if it succeeds, sequences `ops` describing it, in one
    /// step: the op order is exactly the order the leader's files changed in.
    pub fn apply<T>(
        &self,
        local: impl FnOnce() -> io::Result<T>,
        ops: impl FnOnce() -> Vec<FileOp>,
    ) -> io::Result<T> {
        let mut state = self.lock();
        let result = local()?;
        for op in ops() {
            state.last_seq += 1;
            let seq = state.last_seq;
            let op = Arc::new(op);
            for follower in state.followers.values_mut() {
                let Some(link) = &follower.link else { continue };
                let weight = op.weight();
                let full = link.queued_bytes.fetch_add(weight, Ordering::Relaxed) + weight
                    > FOLLOWER_QUEUE_BYTES_MAX;
                let sent = !full && link.queue.try_send((seq, op.clone())).is_ok();
                if !sent {
                    // Far behind (or gone): drop the link; it reconnects and catches up from files.
                    follower.drop_link();
                }
            }
        }
        Ok(result)
    }

    /// The last op sequenced.
    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// Blocks until every op through `seq` is held as the confirm rule requires. A deposed
    /// leader's writer blocks for good: nothing more is confirmed, and the process is about to be
    /// replaced by a follower (an error here would make the store give up and exit instead).
    pub fn wait_replicated(&self, seq: u64) {
        let mut state = self.lock();
        while !confirmable(&state, seq) {
            state = self.changed.wait_timeout(state, WAIT_TICK).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Whether a sync through `seq` may complete now.
    pub fn confirmable(&self, seq: u64) -> bool {
        confirmable(&self.lock(), seq)
    }

    /// Whether [`Hub::depose`] was called.
    pub fn is_deposed(&self) -> bool {
        self.lock().deposed
    }

    /// This node lost its term: no waiting or future sync completes.
    pub fn depose(&self) {
        self.lock().deposed = true;
        self.changed.notify_all();
    }

    pub fn set_min_in_sync(&self, min_in_sync: usize) {
        self.lock().min_in_sync = min_in_sync.max(1);
        self.changed.notify_all();
    }

    pub fn min_in_sync(&self) -> usize {
        self.lock().min_in_sync
    }

    /// The leader's lease holds until `until` by its clock: no sync completes from then on.
    pub fn set_lease_until(&self, until: Instant) {
        self.lock().lease_until = Some(until);
        self.changed.notify_all();
    }

    /// etcd now records `recorded` (the leader left out) as the in-sync set.
    pub fn set_recorded(&self, recorded: BTreeSet<String>) {
        self.lock().recorded = Some(recorded);
        self.changed.notify_all();
    }

    /// Starts a link to `name`: the catch-up point is now.
    pub fn register(&self, name: &str) -> io::Result<Registration> {
        let mut state = self.lock();
        let files = self.files_now()?;
        let (tx, rx) = sync_channel(FOLLOWER_QUEUE_OPS_MAX);
        let link_id = state.next_link;
        state.next_link += 1;
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let follower = state.followers.entry(name.to_owned()).or_default();
        follower.link = Some(Link { id: link_id, queue: tx, queued_bytes: queued_bytes.clone() });
        follower.progress.on_connect(Instant::now());
        Ok(Registration { after_seq: state.last_seq, files, ops: rx, link_id, queued_bytes })
    }

    /// The replicated files and their lengths (small files with their content), under the lock.
    fn files_now(&self) -> io::Result<Vec<(LeaderFile, Option<Bytes>)>> {
        let mut files = Vec::new();
        for (dir, prefix) in [(self.data_dir.clone(), ""), (self.data_dir.join(MESSAGES_DIR), "messages/")] {
            for entry in fs::read_dir(&dir)? {
                let entry = entry?;
                let meta = entry.metadata()?;
                let path = format!("{prefix}{}", entry.file_name().to_string_lossy());
                if !meta.is_file() || !valid_path(&path) {
                    continue;
                }
                // Snapshots are replaced by rename: their content now, not later. Segments and
                // packs only grow or are written once: sent by range.
                let name = entry.file_name();
                let content = if hourglass_store::is_write_once(&name.to_string_lossy()) {
                    None
                } else {
                    Some(Bytes::from(fs::read(entry.path())?))
                };
                files.push((LeaderFile { path, len: meta.len() }, content));
            }
        }
        Ok(files)
    }

    /// The follower holds everything through `seq`; `streaming`: its catch-up is done.
    pub fn ack(&self, name: &str, link_id: u64, seq: u64, streaming: bool) {
        let mut state = self.lock();
        if let Some(follower) = state.followers.get_mut(name) {
            if follower.link.as_ref().is_some_and(|link| link.id == link_id) {
                follower.progress.on_ack(seq, streaming, Instant::now());
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    /// The link `link_id` to `name` is catching the follower up: it took another chunk.
    pub fn link_progress(&self, name: &str, link_id: u64) {
        let mut state = self.lock();
        if let Some(follower) = state.followers.get_mut(name) {
            if follower.link.as_ref().is_some_and(|link| link.id == link_id) {
                follower.progress.on_progress(Instant::now());
            }
        }
    }

    /// The link `link_id` to `name` ended.
    pub fn disconnect(&self, name: &str, link_id: u64) {
        let mut state = self.lock();
        if let Some(follower) = state.followers.get_mut(name) {
            if follower.link.as_ref().is_some_and(|link| link.id == link_id) {
                follower.drop_link();
            }
        }
    }

    /// The hub's set, and which followers it can replicate to now (connected, and heard from
    /// within `lag_timeout`): what the in-sync rules decide on.
    pub fn replicas(&self, now: Instant, lag_timeout: Duration) -> Replicas {
        let state = self.lock();
        let reachable = state
            .followers
            .iter()
            .filter(|(_, f)| f.progress.reachable(now, lag_timeout))
            .map(|(name, _)| name.clone())
            .collect();
        Replicas { in_sync: state.in_sync.clone(), reachable }
    }

    /// Followers reachable, streaming and holding every op, not yet in sync: admitted here at
    /// once (so no confirm goes without them from now on); the coordinator then records them
    /// in etcd.
    pub fn admit_caught_up(&self, now: Instant, lag_timeout: Duration) -> Vec<String> {
        let mut state = self.lock();
        let last = state.last_seq;
        let ready: Vec<String> = state
            .followers
            .iter()
            .filter(|(name, f)| {
                f.progress.caught_up(last, now, lag_timeout) && !state.in_sync.contains(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        state.in_sync.extend(ready.iter().cloned());
        ready
    }

    pub fn remove_in_sync(&self, names: &[String]) {
        let mut state = self.lock();
        for name in names {
            state.in_sync.remove(name);
        }
        drop(state);
        self.changed.notify_all();
    }

    pub fn in_sync(&self) -> BTreeSet<String> {
        self.lock().in_sync.clone()
    }

    pub fn status(&self) -> Vec<FollowerStatus> {
        let state = self.lock();
        let lag = |f: &Follower| state.last_seq.saturating_sub(f.progress.acked);
        state
            .followers
            .iter()
            .map(|(name, f)| FollowerStatus {
                name: name.clone(),
                lag_records: lag(f),
                in_sync: state.in_sync.contains(name),
            })
            .collect()
    }
}

fn confirmable(state: &State, seq: u64) -> bool {
    let acked = |name: &str| state.followers.get(name).map(|f| f.progress.acked);
    !state.deposed
        && state.lease_until.is_none_or(|until| Instant::now() < until)
        && may_confirm(seq, state.min_in_sync, &state.in_sync, state.recorded.as_ref(), acked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(min_in_sync: usize) -> (tempfile::TempDir, Arc<Hub>) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(MESSAGES_DIR)).unwrap();
        let hub = Hub::new(dir.path().to_owned(), min_in_sync, Some(BTreeSet::new()), Arc::default());
        (dir, hub)
    }

    fn write(hub: &Hub, n: usize) -> u64 {
        for _ in 0..n {
            hub.apply(|| Ok(()), || vec![FileOp::Create { path: "x".into() }]).unwrap();
        }
        hub.last_seq()
    }

    const LAG: Duration = Duration::from_secs(5);

    fn snapshot(hub: &Hub, seq: u64) -> bool {
        hub.confirmable(seq)
    }

    #[test]
    fn a_confirm_needs_every_in_sync_follower_and_enough_of_them() {
        let (_dir, hub) = hub(2);
        let seq = write(&hub, 3);
        assert!(!snapshot(&hub, seq), "alone, below min_in_sync 2: held");
        let b = hub.register("b").unwrap();
        hub.ack("b", b.link_id, seq, true);
        assert_eq!(hub.admit_caught_up(Instant::now(), LAG), vec!["b".to_owned()]);
        assert!(snapshot(&hub, seq));
        let c = hub.register("c").unwrap();
        hub.ack("c", c.link_id, seq, true);
        hub.admit_caught_up(Instant::now(), LAG);
        let next = write(&hub, 1);
        hub.ack("b", b.link_id, next, true);
        assert!(!snapshot(&hub, next), "c is in sync and has not acknowledged: held");
        hub.remove_in_sync(&["c".to_owned()]);
        assert!(snapshot(&hub, next), "c removed (after etcd): b and the leader hold it");
    }

    #[test]
    fn only_a_streaming_follower_holding_everything_is_admitted() {
        let (_dir, hub) = hub(2);
        let seq = write(&hub, 2);
        let b = hub.register("b").unwrap();
        hub.ack("b", b.link_id, seq - 1, false);
        assert!(hub.admit_caught_up(Instant::now(), LAG).is_empty(), "still catching up");
        hub.ack("b", b.link_id, seq - 1, true);
        assert!(hub.admit_caught_up(Instant::now(), LAG).is_empty(), "one op behind");
        hub.ack("b", b.link_id, seq, true);
        assert_eq!(hub.admit_caught_up(Instant::now(), LAG), vec!["b".to_owned()]);
    }

    #[test]
    fn the_status_shows_a_follower_in_sync_only_once_the_hub_admitted_it() {
        // A catch-up from the files sequences no op: the follower lags 0 records before it has
        // caught up, so the lag alone does not say it has.
        let (_dir, hub) = hub(2);
        let b = hub.register("b").unwrap();
        let status = |hub: &Hub| hub.status().into_iter().find(|f| f.name == "b").unwrap();
        assert_eq!((status(&hub).lag_records, status(&hub).in_sync), (0, false), "catching up");
        hub.ack("b", b.link_id, 0, true);
        assert!(!status(&hub).in_sync, "caught up, not admitted yet");
        hub.admit_caught_up(Instant::now(), LAG);
        assert!(status(&hub).in_sync);
        hub.remove_in_sync(&["b".to_owned()]);
        assert!(!status(&hub).in_sync);
    }

    #[test]
    fn acks_from_an_old_link_do_not_count() {
        let (_dir, hub) = hub(2);
        let old = hub.register("b").unwrap();
        let new = hub.register("b").unwrap();
        let seq = write(&hub, 1);
        hub.ack("b", old.link_id, seq, true);
        assert!(hub.admit_caught_up(Instant::now(), LAG).is_empty());
        hub.ack("b", new.link_id, seq, true);
        assert_eq!(hub.admit_caught_up(Instant::now(), LAG), vec!["b".to_owned()]);
    }

    #[test]
    fn a_silent_or_disconnected_follower_is_reported_unreachable() {
        let (_dir, hub) = hub(2);
        let lag = Duration::from_secs(5);
        let b = hub.register("b").unwrap();
        hub.ack("b", b.link_id, 0, true);
        hub.admit_caught_up(Instant::now(), LAG);
        let start = Instant::now();
        write(&hub, 1);
        assert!(hub.replicas(start, lag).reachable.contains("b"));
        let later = start + Duration::from_secs(6);
        assert!(!hub.replicas(later, lag).reachable.contains("b"), "silent for 6 s");
        assert!(hub.replicas(later, lag).in_sync.contains("b"), "still in sync until etcd says otherwise");
        hub.disconnect("b", b.link_id);
        assert!(!hub.replicas(start, lag).reachable.contains("b"));
    }

    #[test]
    fn the_recorded_set_holds_confirms_until_etcd_records_another() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(MESSAGES_DIR)).unwrap();
        // Elected against {a, b, c} (this leader is b): a and c may still win.
        let hub =
            Hub::new(dir.path().to_owned(), 2, Some(["a".to_owned(), "c".to_owned()].into()), Arc::default());
        let seq = write(&hub, 1);
        let c = hub.register("c").unwrap();
        hub.ack("c", c.link_id, seq, true);
        hub.admit_caught_up(Instant::now(), LAG);
        assert!(!hub.confirmable(seq), "a is recorded and lacks it");
        hub.set_recorded(["c".to_owned()].into());
        assert!(hub.confirmable(seq));
    }

    #[test]
    fn nothing_is_confirmed_once_the_lease_may_have_expired() {
        let (_dir, hub) = hub(1);
        let seq = write(&hub, 1);
        hub.set_lease_until(Instant::now() + Duration::from_secs(60));
        assert!(hub.confirmable(seq));
        hub.set_lease_until(Instant::now());
        assert!(!hub.confirmable(seq));
    }

    #[test]
    fn a_deposed_leader_confirms_nothing() {
        let (_dir, hub) = hub(1);
        let seq = write(&hub, 1);
        assert!(hub.confirmable(seq));
        hub.depose();
        assert!(!hub.confirmable(seq), "not even what it could confirm alone before");
    }

    #[test]
    fn registered_links_receive_every_later_op_in_order() {
        let (dir, hub) = hub(1);
        fs::write(dir.path().join("definitions.snap"), b"defs").unwrap();
        let b = hub.register("b").unwrap();
        assert_eq!(b.files[0].1.as_deref(), Some(b"defs".as_slice()));
        write(&hub, 2);
        let seqs: Vec<u64> = b.ops.try_iter().map(|(seq, _)| seq).collect();
        assert_eq!(seqs, vec![b.after_seq + 1, b.after_seq + 2]);
    }
}
