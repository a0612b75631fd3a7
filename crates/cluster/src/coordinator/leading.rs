//! The leader, as a state machine without I/O: each round it keeps its lease (and tells the hub
//! until when it holds), checks in one look at etcd that its term still stands, links to every
//! member, and keeps etcd's in-sync set in step with its followers by the rules of
//! [`InSyncRules`] — or steps down.
//!
//! A driver calls [`Leading::wake`] at the start of each round and [`Leading::answered`] with
//! etcd's reply, and does what the returned [`LeadStep`] says: its effects, then its `next`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::election::{min_in_sync, NodeRecord};
use crate::etcd::EtcdError;
use crate::in_sync::{InSyncRules, InSyncStep, Replicas};
use crate::lease::HeldLease;

use super::requests::{Reply, Request, Seen};
use super::{Elected, Step, StepDown, POLL};

/// What the leader knows of its followers (the replication hub).
pub trait Followers {
    /// Takes every follower that has caught up into the set confirms wait for; their names.
    fn admit_caught_up(&mut self, now: Instant, lag_timeout: Duration) -> Vec<String>;
    /// The followers confirms wait for now, and those the leader hears from.
    fn replicas(&self, now: Instant, lag_timeout: Duration) -> Replicas;
}

/// What the driver does on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeadEffect {
    /// The lease holds until then: no confirm and no etcd request past it.
    LeaseUntil(Instant),
    /// How many nodes must hold a record before it is confirmed (the members changed).
    MinInSync(usize),
    /// Keep a replication link to this member from now on.
    Link(NodeRecord),
    /// etcd answered a look at the cluster: for the status views.
    Seen(Seen),
    /// etcd now records `nodes` as the in-sync set: drop `removed` from the hub. `admitted`
    /// caught up since the last record.
    Recorded { nodes: Vec<String>, removed: Vec<String>, admitted: Vec<String> },
    /// These followers caught up and joined the hub's in-sync set, which etcd already records
    /// (a new leader's inherited followers): nothing to write, only to tell.
    Admitted(Vec<String>),
    /// Stop confirming now (the term is being given up).
    Deposed,
}

/// What the driver does next.
#[derive(Debug)]
pub enum LeadNext {
    /// Perform this request and call [`Leading::answered`].
    Ask(Request),
    /// Call [`Leading::wake`] after this long.
    Sleep(Duration),
    /// The term is over.
    SteppedDown(StepDown),
}

/// One answer of [`Leading`].
pub type LeadStep = Step<LeadEffect, LeadNext>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    KeepAlive { sent: Instant },
    Observe,
    Record { nodes: Vec<String>, removed: Vec<String>, admitted: Vec<String> },
    GiveUp { unreachable: Vec<String> },
}

/// A node leading one term.
#[derive(Debug)]
pub struct Leading {
    me: String,
    term: u64,
    /// The lease's TTL, which is also how long a silent follower stays in the set.
    ttl: Duration,
    lease: HeldLease,
    /// `--min-in-sync`, if the operator set it.
    configured_min: Option<usize>,
    rules: InSyncRules,
    linked: BTreeSet<String>,
    awaiting: Awaiting,
}

impl Leading {
    /// Node `me` leading the term it was `elected` to at `now`, with `lease` (of `ttl`).
    /// Confirms need `min_in_sync` nodes until the members say otherwise.
    pub fn new(
        me: &str,
        elected: &Elected,
        lease: HeldLease,
        ttl: Duration,
        min_in_sync: usize,
        configured_min: Option<usize>,
        now: Instant,
    ) -> Leading {
        let inherited = elected.recorded.clone().map(|mut set| {
            set.insert(me.to_owned());
            set
        });
        // A new leader gives its followers one TTL to connect before it counts them as cut off.
        let rules = InSyncRules::new(me, inherited, min_in_sync, ttl / 3, now + ttl);
        Leading {
            me: me.to_owned(),
            term: elected.term,
            ttl,
            lease,
            configured_min,
            rules,
            linked: BTreeSet::new(),
            awaiting: Awaiting::Nothing,
        }
    }

    pub fn term(&self) -> u64 {
        self.term
    }

    pub fn lease(&self) -> HeldLease {
        self.lease
    }

    /// The start of a round: renew the lease if due, then look at etcd.
    pub fn wake(&mut self, now: Instant) -> LeadStep {
        if self.lease.clock.renewal_due(now) {
            self.awaiting = Awaiting::KeepAlive { sent: now };
            return LeadStep::next(LeadNext::Ask(Request::KeepAlive { lease: self.lease.id }));
        }
        self.check_lease_then_look(now)
    }

    /// Whether the lease still holds at `now` by this node's clock; if so, a look at etcd.
    fn check_lease_then_look(&mut self, now: Instant) -> LeadStep {
        if !self.lease.clock.holds(now) {
            return LeadStep::next(LeadNext::SteppedDown(StepDown::LeaseLost));
        }
        self.awaiting = Awaiting::Observe;
        LeadStep {
            effects: vec![LeadEffect::LeaseUntil(self.lease.clock.valid_until())],
            next: LeadNext::Ask(Request::Observe),
        }
    }

    /// etcd's reply to the last request at `now`, with the hub's view of the followers.
    pub fn answered(
        &mut self,
        now: Instant,
        reply: Result<Reply, EtcdError>,
        followers: &mut impl Followers,
    ) -> LeadStep {
        match (std::mem::replace(&mut self.awaiting, Awaiting::Nothing), reply) {
            (Awaiting::KeepAlive { sent }, Ok(Reply::TtlLeft(left))) if left > 0 => {
                self.lease.clock.renewed(sent, Duration::from_secs(left));
                self.check_lease_then_look(now)
            }
            (Awaiting::KeepAlive { .. }, Ok(_)) => LeadStep::next(LeadNext::SteppedDown(StepDown::LeaseLost)),
            (Awaiting::KeepAlive { .. }, Err(error)) if !self.lease.clock.holds(now) => {
                LeadStep::next(LeadNext::SteppedDown(StepDown::EtcdLost(error)))
            }
            (Awaiting::KeepAlive { .. }, Err(error)) => {
                tracing::debug!(%error, "lease renewal failed; retrying");
                self.check_lease_then_look(now)
            }
            (Awaiting::Observe, Ok(Reply::Seen(seen))) => self.observed(now, seen, followers),
            (Awaiting::Record { nodes, removed, admitted }, Ok(Reply::Done(true))) => {
                self.rules.recorded(&nodes);
                LeadStep {
                    effects: vec![LeadEffect::Recorded { nodes, removed, admitted }],
                    next: LeadNext::Sleep(POLL),
                }
            }
            (Awaiting::Record { .. }, Ok(_)) => {
                LeadStep::next(LeadNext::SteppedDown(StepDown::Superseded(0)))
            }
            (Awaiting::GiveUp { unreachable }, outcome) => {
                if let Err(error) = outcome {
                    tracing::warn!(%error, "could not give up the leader key; it expires with the lease");
                }
                LeadStep::next(LeadNext::SteppedDown(StepDown::CutOff(unreachable)))
            }
            // A failed look or in-sync write: the next round tries again.
            (_, _) => LeadStep::next(LeadNext::Sleep(POLL)),
        }
    }

    fn observed(&mut self, now: Instant, seen: Seen, followers: &mut impl Followers) -> LeadStep {
        match &seen.observation.leader {
            Some((_, term)) if *term == self.term => {}
            Some((_, term)) => {
                return LeadStep::next(LeadNext::SteppedDown(StepDown::Superseded(*term as i64)))
            }
            None => return LeadStep::next(LeadNext::SteppedDown(StepDown::LeaseLost)),
        }
        let mut effects = Vec::new();
        for member in &seen.members {
            if member.name != self.me && self.linked.insert(member.name.clone()) {
                effects.push(LeadEffect::Link(member.clone()));
            }
        }
        let min = min_in_sync(seen.members.len(), self.configured_min);
        self.rules.set_min_in_sync(min);
        effects.push(LeadEffect::MinInSync(min));
        let alive = seen.alive();
        effects.push(LeadEffect::Seen(seen));
        let admitted = followers.admit_caught_up(now, self.ttl);
        let next = match self.rules.next(now, &followers.replicas(now, self.ttl), &alive) {
            InSyncStep::Keep => {
                if !admitted.is_empty() {
                    effects.push(LeadEffect::Admitted(admitted));
                }
                LeadNext::Sleep(POLL)
            }
            InSyncStep::StepDown { unreachable } => {
                // The term is given up at once, not after the lease: a node on the other side of
                // the cut campaigns now (this one holds off when it restarts).
                effects.push(LeadEffect::Deposed);
                self.awaiting = Awaiting::GiveUp { unreachable };
                LeadNext::Ask(Request::GiveUp { term: self.term })
            }
            InSyncStep::Record { set, removed } => {
                self.awaiting = Awaiting::Record { nodes: set.clone(), removed, admitted };
                LeadNext::Ask(Request::RecordInSync { term: self.term, nodes: set })
            }
        };
        LeadStep { effects, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::{InSync, Observation};
    use crate::lease::LeaseClock;

    const TTL: Duration = Duration::from_secs(3);

    fn node(name: &str) -> NodeRecord {
        NodeRecord::named(name)
    }

    /// A look at etcd with `leader` at `term` and nodes `a`, `b`, `c` alive and members.
    fn seen(term: Option<u64>) -> Result<Reply, EtcdError> {
        let all = vec![node("a"), node("b"), node("c")];
        Ok(Reply::Seen(Seen {
            observation: Observation {
                leader: term.map(|term| (node("a"), term)),
                leader_lease: 7,
                in_sync: Some((InSync { term: 4, nodes: vec!["a".into(), "b".into(), "c".into()] }, 9)),
            },
            live: all.clone(),
            members: all,
        }))
    }

    /// The hub, as a test sets it.
    #[derive(Default)]
    struct Hub {
        in_sync: BTreeSet<String>,
        reachable: BTreeSet<String>,
        caught_up: Vec<String>,
    }

    impl Followers for Hub {
        fn admit_caught_up(&mut self, _: Instant, _: Duration) -> Vec<String> {
            let admitted = std::mem::take(&mut self.caught_up);
            self.in_sync.extend(admitted.iter().cloned());
            admitted
        }
        fn replicas(&self, _: Instant, _: Duration) -> Replicas {
            Replicas { in_sync: self.in_sync.clone(), reachable: self.reachable.clone() }
        }
    }

    /// Node `a` leading term 8, elected against the set {a, b, c}, its lease granted at `start`.
    fn leading(start: Instant) -> Leading {
        let lease = HeldLease { id: 7, clock: LeaseClock::granted(TTL, start) };
        let elected =
            Elected { term: 8, recorded: Some(["b".to_owned(), "c".to_owned()].into_iter().collect()) };
        Leading::new("a", &elected, lease, TTL, 2, None, start)
    }

    fn unreachable() -> Result<Reply, EtcdError> {
        Err(EtcdError::Unreachable("test".into()))
    }

    #[test]
    fn the_lease_window_counts_from_the_keepalives_send_time_and_ends_the_term_when_etcd_is_silent() {
        let start = Instant::now();
        let mut machine = leading(start);
        let mut hub = Hub::default();
        let step = machine.wake(start);
        assert_eq!(step.effects, vec![LeadEffect::LeaseUntil(LeaseClock::granted(TTL, start).valid_until())]);
        // A keepalive sent at 1 s and answered at 2.5 s holds from 1 s.
        let sent = start + Duration::from_secs(1);
        machine.answered(sent, seen(Some(8)), &mut hub);
        assert_eq!(machine.wake(sent).next.ask(), Some(Request::KeepAlive { lease: 7 }));
        let step = machine.answered(sent + Duration::from_millis(1500), Ok(Reply::TtlLeft(3)), &mut hub);
        assert_eq!(step.effects, vec![LeadEffect::LeaseUntil(LeaseClock::granted(TTL, sent).valid_until())]);
        machine.answered(sent, seen(Some(8)), &mut hub);
        // etcd goes silent: renewals fail, the term goes on while the window holds, then ends.
        let later = sent + TTL / 3;
        machine.wake(later);
        assert_eq!(machine.answered(later, unreachable(), &mut hub).next.ask(), Some(Request::Observe));
        machine.answered(later, unreachable(), &mut hub);
        let past = LeaseClock::granted(TTL, sent).valid_until();
        machine.wake(past);
        let step = machine.answered(past, unreachable(), &mut hub);
        assert!(matches!(step.next, LeadNext::SteppedDown(StepDown::EtcdLost(_))), "{step:?}");
    }

    #[test]
    fn a_leader_whose_key_is_gone_or_another_terms_steps_down() {
        let start = Instant::now();
        let mut hub = Hub::default();
        let mut machine = leading(start);
        machine.wake(start);
        let step = machine.answered(start, seen(Some(11)), &mut hub);
        assert!(matches!(step.next, LeadNext::SteppedDown(StepDown::Superseded(11))), "{step:?}");
        let mut machine = leading(start);
        machine.wake(start);
        let step = machine.answered(start, seen(None), &mut hub);
        assert!(matches!(step.next, LeadNext::SteppedDown(StepDown::LeaseLost)), "{step:?}");
    }

    #[test]
    fn the_leader_links_to_each_other_member_once_and_needs_a_majority_of_them() {
        let start = Instant::now();
        let mut hub = Hub::default();
        let mut machine = leading(start);
        machine.wake(start);
        let step = machine.answered(start, seen(Some(8)), &mut hub);
        let links: Vec<_> = step.effects.iter().filter(|e| matches!(e, LeadEffect::Link(_))).collect();
        assert_eq!(links, vec![&LeadEffect::Link(node("b")), &LeadEffect::Link(node("c"))]);
        assert!(step.effects.contains(&LeadEffect::MinInSync(2)));
        machine.wake(start);
        let step = machine.answered(start, seen(Some(8)), &mut hub);
        assert!(!step.effects.iter().any(|e| matches!(e, LeadEffect::Link(_))), "{step:?}");
    }

    #[test]
    fn a_caught_up_follower_is_recorded_in_etcd_before_the_hub_drops_the_others() {
        let start = Instant::now();
        let mut hub =
            Hub { caught_up: vec!["b".into()], reachable: ["b".to_owned()].into(), ..Hub::default() };
        let mut machine = leading(start);
        machine.wake(start);
        let step = machine.answered(start, seen(Some(8)), &mut hub);
        let nodes = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(step.next.ask(), Some(Request::RecordInSync { term: 8, nodes: nodes.clone() }));
        assert!(!step.effects.iter().any(|e| matches!(e, LeadEffect::Recorded { .. })));
        let step = machine.answered(start, Ok(Reply::Done(true)), &mut hub);
        let recorded = LeadEffect::Recorded { nodes, removed: vec![], admitted: vec!["b".into()] };
        assert_eq!(step.effects, vec![recorded]);
        // Once recorded, the same set is not written again.
        machine.wake(start);
        assert!(matches!(machine.answered(start, seen(Some(8)), &mut hub).next, LeadNext::Sleep(_)));
        // A write refused because the term is over ends it.
        let mut machine = leading(start);
        let mut hub =
            Hub { caught_up: vec!["b".into()], reachable: ["b".to_owned()].into(), ..Hub::default() };
        machine.wake(start);
        machine.answered(start, seen(Some(8)), &mut hub);
        let step = machine.answered(start, Ok(Reply::Done(false)), &mut hub);
        assert!(matches!(step.next, LeadNext::SteppedDown(StepDown::Superseded(_))), "{step:?}");
    }

    /// A new leader's followers are in the set etcd records; as each catches up it joins the
    /// hub's set without a write, and that is told (logged as "follower in sync") all the same.
    #[test]
    fn inherited_followers_that_catch_up_are_told_without_a_write() {
        let start = Instant::now();
        let reachable: BTreeSet<String> = ["b".to_owned(), "c".to_owned()].into();
        let mut hub = Hub { caught_up: vec!["b".into(), "c".into()], reachable, ..Hub::default() };
        let mut machine = leading(start);
        machine.wake(start);
        let step = machine.answered(start, seen(Some(8)), &mut hub);
        assert!(matches!(step.next, LeadNext::Sleep(_)), "{step:?}");
        assert!(step.effects.contains(&LeadEffect::Admitted(vec!["b".into(), "c".into()])), "{step:?}");
        machine.wake(start);
        let step = machine.answered(start, seen(Some(8)), &mut hub);
        assert!(!step.effects.iter().any(|e| matches!(e, LeadEffect::Admitted(_))), "told once");
    }

    #[test]
    fn a_leader_cut_from_its_followers_gives_up_its_key_after_its_grace_and_the_hold() {
        let start = Instant::now();
        let mut hub = Hub::default();
        let mut machine = leading(start);
        let mut at = start;
        let step = loop {
            machine.wake(at);
            if machine.lease.clock.renewal_due(at) {
                machine.answered(at, Ok(Reply::TtlLeft(3)), &mut hub);
            }
            let step = machine.answered(at, seen(Some(8)), &mut hub);
            if !matches!(step.next, LeadNext::Sleep(_)) {
                break step;
            }
            at += POLL;
        };
        // Followers that never connected: not before one TTL (their time to connect), by which
        // time the 1 s hold has passed too.
        assert!(at - start >= TTL && at - start < TTL + 2 * POLL, "{:?}", at - start);
        assert!(step.effects.contains(&LeadEffect::Deposed));
        assert_eq!(step.next.ask(), Some(Request::GiveUp { term: 8 }));
        let step = machine.answered(at, Ok(Reply::Done(true)), &mut hub);
        match step.next {
            LeadNext::SteppedDown(StepDown::CutOff(nodes)) => assert_eq!(nodes, vec!["b", "c"]),
            other => panic!("{other:?}"),
        }
    }

    impl LeadNext {
        fn ask(&self) -> Option<Request> {
            match self {
                LeadNext::Ask(request) => Some(request.clone()),
                _ => None,
            }
        }
    }
}
