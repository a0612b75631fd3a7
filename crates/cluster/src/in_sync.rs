//! The leader's rules for its in-sync set, its confirms and its step-down (sans-IO: the hub and
//! the coordinator feed them what they saw and `now`, and do what they answer).
//!
//! Two sets are kept apart:
//! - the **hub's set**: followers that hold every op sequenced so far. A follower joins it here
//!   first, so that from then on nothing is confirmed without it.
//! - the **recorded set**: the in-sync key as etcd holds it, the nodes that may campaign. The
//!   leader starts its term with the set it campaigned against.
//!
//! A record is confirmed only once every follower of *both* sets has acknowledged it (and the
//! leader's lease holds, [`crate::lease`]). Every node that may win the next election has
//! acknowledged every confirmed record, whatever the timing of the etcd writes
//! (docs/clustering.md "Why nothing confirmed is lost").
//!
//! The recorded set is rewritten, conditional on the leader's term, to the hub's set (with
//! the leader) whenever it differs. **It is never written smaller than `min_in_sync`.** When too
//! few followers keep up, the leader keeps the set and holds confirms. When some follower of
//! the recorded set is alive in etcd but this leader cannot reach it (a partition between the
//! nodes), the leader steps down after [`InSyncRules`]'s hold. That follower, still in the set,
//! campaigns, and the majority side serves again.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One follower's replication progress as the leader's hub tracks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// A link to the follower is up (authenticated, registered with the hub).
    pub connected: bool,
    /// The follower holds everything through this op (acknowledged after fsync).
    pub acked: u64,
    /// The link has finished its catch-up: `acked` counts from the live stream.
    pub streaming: bool,
    /// The last sign of life on the link: an acknowledgement (the link sends a heartbeat when it
    /// has nothing else to send, and the follower answers it), or a catch-up chunk the follower
    /// took.
    pub last_heard: Option<Instant>,
}

impl Progress {
    /// The follower acknowledged `seq` (an op's, or a heartbeat's answer) at `now`.
    pub fn on_ack(&mut self, seq: u64, streaming: bool, now: Instant) {
        self.acked = self.acked.max(seq);
        self.streaming |= streaming;
        self.last_heard = Some(now);
    }

    /// The link catching the follower up got another chunk through at `now`.
    pub fn on_progress(&mut self, now: Instant) {
        self.last_heard = Some(now);
    }

    /// A new link at `now`: catch-up starts over.
    pub fn on_connect(&mut self, now: Instant) {
        *self = Progress { connected: true, acked: self.acked, streaming: false, last_heard: Some(now) };
    }

    pub fn on_disconnect(&mut self) {
        self.connected = false;
        self.streaming = false;
    }

    /// Whether the leader can replicate to this follower now: connected, and heard from within
    /// `lag_timeout`, traffic or not.
    pub fn reachable(&self, now: Instant, lag_timeout: Duration) -> bool {
        self.connected && self.last_heard.is_some_and(|at| now.saturating_duration_since(at) < lag_timeout)
    }

    /// Whether the follower may join the hub's set: reachable, streaming and holding every op.
    /// Reachable too: a follower cut off while no op was written holds every op, and joining
    /// the set then would hold every later confirm for it while the set etcd records, which
    /// only reachable followers join, never waits for it again.
    pub fn caught_up(&self, last_seq: u64, now: Instant, lag_timeout: Duration) -> bool {
        self.reachable(now, lag_timeout) && self.streaming && self.acked >= last_seq
    }
}

/// Whether ops through `seq` may be confirmed: etcd records an in-sync set (`None`: a new
/// cluster whose first set is not written yet, when any node may campaign), every follower of
/// the hub's set and of the recorded set (the leader left out of both) has acknowledged them,
/// and the hub's set with the leader numbers at least `min_in_sync`. `acked` gives what a
/// follower acknowledged (`None`: the hub has never heard of it).
pub fn may_confirm(
    seq: u64,
    min_in_sync: usize,
    in_sync: &BTreeSet<String>,
    recorded: Option<&BTreeSet<String>>,
    acked: impl Fn(&str) -> Option<u64>,
) -> bool {
    let Some(recorded) = recorded else { return false };
    in_sync.len() + 1 >= min_in_sync
        && in_sync.iter().chain(recorded.iter()).all(|name| acked(name).is_some_and(|a| a >= seq))
}

/// What the leader does about its in-sync set after one look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InSyncStep {
    /// Nothing to change.
    Keep,
    /// Write `set` (the leader first) as the recorded set, conditional on the term; once etcd
    /// took it, tell [`InSyncRules::recorded`] and drop `removed` from the hub's set.
    Record { set: Vec<String>, removed: Vec<String> },
    /// Too few followers reachable to confirm, while a node that may lead instead is alive in
    /// etcd: give up the term (the recorded set stays as it is).
    StepDown { unreachable: Vec<String> },
}

/// What the hub reports of the followers in one look.
#[derive(Clone, Debug, Default)]
pub struct Replicas {
    /// The hub's set (the leader not in it).
    pub in_sync: BTreeSet<String>,
    /// Followers the leader can replicate to now ([`Progress::reachable`]).
    pub reachable: BTreeSet<String>,
}

/// The in-sync and step-down rules of one leader's term.
#[derive(Clone, Debug)]
pub struct InSyncRules {
    me: String,
    min_in_sync: usize,
    /// How long a leader stays unable to confirm, with another candidate alive, before it
    /// steps down.
    hold: Duration,
    /// No step-down before then: the followers get time to see the new leader in etcd and
    /// connect (an etcd read that times out takes 1.5 s).
    not_before: Instant,
    /// The recorded set (the leader included once it wrote one); `None` before the first.
    recorded: Option<BTreeSet<String>>,
    stuck_since: Option<Instant>,
}

impl InSyncRules {
    /// A term won by `me` against the recorded set `inherited` (`None`: a new cluster), that
    /// may not step down before `not_before`.
    pub fn new(
        me: &str,
        inherited: Option<BTreeSet<String>>,
        min_in_sync: usize,
        hold: Duration,
        not_before: Instant,
    ) -> InSyncRules {
        InSyncRules {
            me: me.to_owned(),
            min_in_sync: min_in_sync.max(1),
            hold,
            not_before,
            recorded: inherited,
            stuck_since: None,
        }
    }

    pub fn set_min_in_sync(&mut self, min_in_sync: usize) {
        self.min_in_sync = min_in_sync.max(1);
    }

    /// etcd took `set` as the recorded set.
    pub fn recorded(&mut self, set: &[String]) {
        self.recorded = Some(set.iter().cloned().collect());
    }

    /// The next step, from the hub's view of the followers and the nodes etcd lists as alive.
    pub fn next(&mut self, now: Instant, replicas: &Replicas, alive: &BTreeSet<String>) -> InSyncStep {
        let mut wanted: BTreeSet<String> =
            replicas.in_sync.intersection(&replicas.reachable).cloned().collect();
        wanted.insert(self.me.clone());
        if wanted.len() >= self.min_in_sync {
            self.stuck_since = None;
            if self.recorded.as_ref() == Some(&wanted) {
                return InSyncStep::Keep;
            }
            let removed = replicas.in_sync.difference(&wanted).cloned().collect();
            let mut set: Vec<String> = wanted.into_iter().filter(|name| *name != self.me).collect();
            set.insert(0, self.me.clone());
            return InSyncStep::Record { set, removed };
        }
        // Fewer than a confirm needs. Reachable followers still catching up count: they will
        // be in sync soon, so the leader waits for them.
        let reachable = replicas.reachable.len() + 1;
        let unreachable: Vec<String> = self
            .recorded
            .iter()
            .flatten()
            .filter(|name| **name != self.me && alive.contains(*name) && !replicas.reachable.contains(*name))
            .cloned()
            .collect();
        if reachable >= self.min_in_sync || unreachable.is_empty() {
            // Either followers are on their way, or nobody else could lead: hold confirms.
            self.stuck_since = None;
            return InSyncStep::Keep;
        }
        let since = *self.stuck_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.hold && now >= self.not_before {
            return InSyncStep::StepDown { unreachable };
        }
        InSyncStep::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(1);

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn replicas(in_sync: &[&str], reachable: &[&str]) -> Replicas {
        Replicas { in_sync: set(in_sync), reachable: set(reachable) }
    }

    fn record(set: &[&str], removed: &[&str]) -> InSyncStep {
        InSyncStep::Record {
            set: set.iter().map(|n| (*n).to_owned()).collect(),
            removed: removed.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn a_new_term_records_its_set_once_a_confirm_is_possible_and_not_before() {
        let now = Instant::now();
        let mut rules = InSyncRules::new("b", Some(set(&["a", "b", "c"])), 2, HOLD, Instant::now());
        let alive = set(&["a", "b", "c"]);
        // c is connected and catching up: wait, the inherited set stays.
        assert_eq!(rules.next(now, &replicas(&[], &["c"]), &alive), InSyncStep::Keep);
        // c caught up: the set becomes {b, c}; a (the old leader, unreachable) leaves it.
        assert_eq!(rules.next(now, &replicas(&["c"], &["c"]), &alive), record(&["b", "c"], &[]));
    }

    #[test]
    fn a_lagging_follower_leaves_the_set_while_a_majority_remains() {
        let now = Instant::now();
        let mut rules = InSyncRules::new("a", Some(set(&["a", "b", "c"])), 2, HOLD, Instant::now());
        let step = rules.next(now, &replicas(&["b", "c"], &["b"]), &set(&["a", "b", "c"]));
        assert_eq!(step, record(&["a", "b"], &["c"]));
    }

    #[test]
    fn the_set_is_never_written_smaller_than_a_confirm_needs() {
        let now = Instant::now();
        let mut rules = InSyncRules::new("a", Some(set(&["a", "b", "c"])), 2, HOLD, Instant::now());
        // Both followers stalled and dead in etcd: hold confirms, keep the set, keep leading.
        let dead = set(&["a"]);
        for ms in [0, 1_000, 60_000] {
            let at = now + Duration::from_millis(ms);
            assert_eq!(rules.next(at, &replicas(&["b", "c"], &[]), &dead), InSyncStep::Keep);
        }
    }

    #[test]
    fn a_leader_cut_from_live_followers_steps_down_after_the_hold() {
        let now = Instant::now();
        let mut rules = InSyncRules::new("a", Some(set(&["a", "b", "c"])), 2, HOLD, Instant::now());
        let alive = set(&["a", "b", "c"]);
        let cut = replicas(&["b", "c"], &[]);
        assert_eq!(rules.next(now, &cut, &alive), InSyncStep::Keep);
        assert_eq!(rules.next(now + HOLD / 2, &cut, &alive), InSyncStep::Keep);
        let step = rules.next(now + HOLD, &cut, &alive);
        assert_eq!(step, InSyncStep::StepDown { unreachable: vec!["b".into(), "c".into()] });
    }

    #[test]
    fn a_new_leader_gives_its_followers_time_to_connect_before_it_steps_down() {
        let now = Instant::now();
        let grace = Duration::from_secs(3);
        let mut rules = InSyncRules::new("b", Some(set(&["a", "b", "c"])), 2, HOLD, now + grace);
        let alive = set(&["a", "b", "c"]);
        let nobody = replicas(&[], &[]);
        assert_eq!(rules.next(now, &nobody, &alive), InSyncStep::Keep);
        assert_eq!(rules.next(now + HOLD, &nobody, &alive), InSyncStep::Keep, "within the grace");
        let step = rules.next(now + grace, &nobody, &alive);
        assert!(matches!(step, InSyncStep::StepDown { .. }), "{step:?}");
    }

    #[test]
    fn reaching_a_follower_again_within_the_hold_restarts_it() {
        let now = Instant::now();
        let mut rules = InSyncRules::new("a", Some(set(&["a", "b", "c"])), 2, HOLD, Instant::now());
        let alive = set(&["a", "b", "c"]);
        rules.next(now, &replicas(&["b", "c"], &[]), &alive);
        rules.next(now + HOLD / 2, &replicas(&["b", "c"], &["b"]), &alive);
        let step = rules.next(now + HOLD, &replicas(&["b", "c"], &[]), &alive);
        assert_eq!(step, InSyncStep::Keep, "stuck again only since HOLD, not since 0");
    }

    #[test]
    fn confirms_wait_for_the_hub_set_and_the_recorded_set() {
        let acked = |name: &str| match name {
            "b" => Some(10),
            "c" => Some(4),
            _ => None,
        };
        assert!(may_confirm(10, 2, &set(&["b"]), Some(&set(&[])), acked));
        assert!(!may_confirm(10, 2, &set(&["b"]), Some(&set(&["c"])), acked), "c may win: it must hold it");
        assert!(!may_confirm(10, 2, &set(&["b"]), Some(&set(&["d"])), acked), "d never acknowledged");
        assert!(!may_confirm(1, 3, &set(&["b"]), Some(&set(&[])), acked), "too few in sync");
        assert!(!may_confirm(1, 1, &set(&[]), None, acked), "a new cluster: its first set not written");
    }

    #[test]
    fn a_new_cluster_records_its_first_set_even_when_it_is_the_leader_alone() {
        let mut rules = InSyncRules::new("a", None, 1, HOLD, Instant::now());
        let step = rules.next(Instant::now(), &replicas(&[], &[]), &set(&["a"]));
        assert_eq!(step, record(&["a"], &[]));
        rules.recorded(&["a".to_owned()]);
        assert_eq!(rules.next(Instant::now(), &replicas(&[], &[]), &set(&["a"])), InSyncStep::Keep);
    }

    #[test]
    fn a_follower_is_unreachable_when_disconnected_or_silent_for_the_lag_timeout() {
        let now = Instant::now();
        let lag = Duration::from_secs(3);
        let mut p = Progress::default();
        assert!(!p.reachable(now, lag), "never connected");
        p.on_connect(now);
        assert!(p.reachable(now + lag / 2, lag), "just connected");
        assert!(!p.reachable(now + lag, lag), "nothing heard for the timeout");
        p.on_progress(now + lag);
        assert!(p.reachable(now + lag + lag / 2, lag), "a catch-up chunk went through");
        p.on_ack(5, true, now + lag * 2);
        assert!(p.caught_up(5, now + lag * 2, lag));
        assert!(!p.caught_up(5, now + lag * 3, lag), "holding every op, but silent: not caught up");
        assert!(p.reachable(now + lag * 2 + lag / 2, lag));
        p.on_disconnect();
        assert!(!p.reachable(now + lag * 2, lag));
    }

    #[test]
    fn an_idle_follower_that_answers_heartbeats_stays_reachable_and_a_silent_one_does_not() {
        // Issue #21 in namespaces: with the leader's path cut and no op to replicate, the leader
        // noticed nothing until a client's write came 5 s later. Heartbeats are answered by
        // acks with nothing new: reachability follows them, not the traffic.
        let now = Instant::now();
        let lag = Duration::from_secs(3);
        let mut p = Progress::default();
        p.on_connect(now);
        p.on_ack(5, true, now);
        let mut at = now;
        for _ in 0..20 {
            at += Duration::from_millis(500);
            p.on_ack(5, true, at);
        }
        assert!(p.reachable(at + lag / 2, lag));
        assert!(!p.reachable(at + lag, lag), "the heartbeats stopped being answered");
    }
}
