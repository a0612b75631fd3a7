//! A node that does not lead, as a state machine without I/O: it keeps its lease, looks at etcd,
//! follows the leader it names, and campaigns when the election rule lets it, until it wins.
//!
//! A driver calls [`Following::wake`] at the start of each round and [`Following::answered`]
//! with etcd's reply (or the request's failure), and does what the returned
//! [`FollowStep`] says: its effects, then its `next`.

use std::time::{Duration, Instant};

use crate::election::{decide, Decision, NodeRecord, Observation};
use crate::etcd::EtcdError;
use crate::lease::{HeldLease, LeaseClock};
use crate::retry::Backoff;

use super::requests::{Reply, Request, Seen};
use super::{Elected, Step, POLL};

/// What the driver does on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowEffect {
    /// etcd answered a look at the cluster: for the status views.
    Seen(Seen),
    /// This leader of this term is the one to follow (`changed`: a different one than before).
    Follow { leader: NodeRecord, term: u64, changed: bool },
    /// Nobody leads now.
    NoLeader,
    /// The lease had expired (the node was paused or cut off) and this one replaces it.
    Registered { lease: i64 },
    /// This node won `term`: from now on only its own stream is applied here.
    Won { term: u64, answer_lost: bool },
    /// The leader of `term` was found dead (`dead_leader.rs`) and its key deleted (`deposed`), or
    /// it was gone already.
    Deposed { leader: String, term: u64, deposed: bool },
}

/// What the driver does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowNext {
    /// Perform this request and call [`Following::answered`].
    Ask(Request),
    /// Call [`Following::wake`] after this long.
    Sleep(Duration),
    /// This node leads now.
    Elected(Elected),
}

/// One answer of [`Following`].
pub type FollowStep = Step<FollowEffect, FollowNext>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    KeepAlive { sent: Instant },
    Register { sent: Instant },
    Observe,
    Campaign { seen: Observation },
    Depose { leader: String, term: u64 },
}

/// A node that does not lead.
#[derive(Debug)]
pub struct Following {
    me: String,
    ttl: Duration,
    lease: HeldLease,
    /// It does not campaign before then (it has just stepped down).
    campaign_not_before: Option<Instant>,
    last_leader: Option<(String, u64)>,
    /// The pauses after failed looks at etcd.
    backoff: Backoff,
    awaiting: Awaiting,
}

impl Following {
    /// Node `me`, holding `lease` of `ttl`. `jitter_seed` seeds the back-off's jitter.
    pub fn new(
        me: &str,
        ttl: Duration,
        lease: HeldLease,
        campaign_not_before: Option<Instant>,
        jitter_seed: u64,
    ) -> Following {
        Following {
            me: me.to_owned(),
            ttl,
            lease,
            campaign_not_before,
            last_leader: None,
            backoff: Backoff::seeded(jitter_seed),
            awaiting: Awaiting::Nothing,
        }
    }

    pub fn lease(&self) -> HeldLease {
        self.lease
    }

    /// The start of a round: renew the lease if due, then look at etcd.
    pub fn wake(&mut self, now: Instant) -> FollowStep {
        if self.lease.clock.renewal_due(now) {
            self.awaiting = Awaiting::KeepAlive { sent: now };
            return FollowStep::next(FollowNext::Ask(Request::KeepAlive { lease: self.lease.id }));
        }
        self.look()
    }

    /// The driver found leader `leader` of `term` dead (its stream ended and its client port
    /// refuses connections, `dead_leader.rs`): if it is the one this node follows, its key is
    /// deleted now, as long as it is still that term's, rather than after its lease runs out.
    /// `None`: not the leader followed; go on as before.
    pub fn leader_gone(&mut self, leader: &str, term: u64) -> Option<FollowStep> {
        if self.last_leader.as_ref() != Some(&(leader.to_owned(), term)) {
            return None;
        }
        self.awaiting = Awaiting::Depose { leader: leader.to_owned(), term };
        Some(FollowStep::next(FollowNext::Ask(Request::GiveUp { term })))
    }

    fn look(&mut self) -> FollowStep {
        self.awaiting = Awaiting::Observe;
        FollowStep::next(FollowNext::Ask(Request::Observe))
    }

    /// etcd's reply to the last request, at `now`.
    pub fn answered(&mut self, now: Instant, reply: Result<Reply, EtcdError>) -> FollowStep {
        match (std::mem::replace(&mut self.awaiting, Awaiting::Nothing), reply) {
            (Awaiting::KeepAlive { sent }, Ok(Reply::TtlLeft(left))) if left > 0 => {
                self.lease.clock.renewed(sent, Duration::from_secs(left));
                self.look()
            }
            (Awaiting::KeepAlive { .. }, Ok(Reply::TtlLeft(_))) => {
                self.awaiting = Awaiting::Register { sent: now };
                FollowStep::next(FollowNext::Ask(Request::Register))
            }
            (Awaiting::Register { sent }, Ok(Reply::Registered { lease })) => {
                self.lease = HeldLease { id: lease, clock: LeaseClock::granted(self.ttl, sent) };
                let mut step = self.look();
                step.effects.push(FollowEffect::Registered { lease });
                step
            }
            // A failed renewal or registration: the look at etcd goes ahead all the same.
            (Awaiting::KeepAlive { .. } | Awaiting::Register { .. }, _) => self.look(),
            (Awaiting::Observe, Ok(Reply::Seen(seen))) => {
                self.backoff.reset();
                self.observed(now, seen)
            }
            (Awaiting::Observe, _) => {
                // The role stays as it was: a leader this node forwarded to may still serve (its
                // own lease decides that), and the next look at etcd corrects it.
                FollowStep::next(FollowNext::Sleep(self.backoff.next_delay()))
            }
            (Awaiting::Campaign { seen }, Ok(Reply::Won(Some(term)))) => FollowStep {
                effects: vec![FollowEffect::Won { term, answer_lost: false }],
                next: FollowNext::Elected(self.elected(term, &seen)),
            },
            // Lost, or no answer: if it won after all, the next look says so (`Decision::Lead`).
            (Awaiting::Campaign { .. }, _) => FollowStep::next(FollowNext::Sleep(POLL)),
            // Deposed or not (the key was gone already, or etcd did not answer): look again at
            // once; without a leader key the election rule runs.
            (Awaiting::Depose { leader, term }, reply) => {
                let deposed = matches!(reply, Ok(Reply::Done(true)));
                let mut step = self.look();
                step.effects.push(FollowEffect::Deposed { leader, term, deposed });
                step
            }
            (Awaiting::Nothing, _) => FollowStep::next(FollowNext::Sleep(POLL)),
        }
    }

    fn observed(&mut self, now: Instant, seen: Seen) -> FollowStep {
        let mut effects = vec![FollowEffect::Seen(seen.clone())];
        let next = match decide(&self.me, self.lease.id, &seen.observation) {
            Decision::Follow(leader, term) => {
                let changed = self.last_leader.as_ref() != Some(&(leader.name.clone(), term));
                self.last_leader = Some((leader.name.clone(), term));
                effects.push(FollowEffect::Follow { leader, term, changed });
                FollowNext::Sleep(POLL)
            }
            Decision::Campaign { .. } if self.campaign_not_before.is_some_and(|at| now < at) => {
                FollowNext::Sleep(POLL)
            }
            Decision::Campaign { in_sync_revision } => {
                self.awaiting = Awaiting::Campaign { seen: seen.observation };
                FollowNext::Ask(Request::Campaign { lease: self.lease.id, in_sync_revision })
            }
            Decision::Lead(term) => {
                effects.push(FollowEffect::Won { term, answer_lost: true });
                FollowNext::Elected(self.elected(term, &seen.observation))
            }
            Decision::Wait => {
                effects.push(FollowEffect::NoLeader);
                FollowNext::Sleep(POLL)
            }
        };
        FollowStep { effects, next }
    }

    /// What this node won at `term`, with the in-sync set `seen` before it campaigned (nobody
    /// but the leader of `term` can have changed it since).
    fn elected(&self, term: u64, seen: &Observation) -> Elected {
        let recorded = seen
            .in_sync
            .as_ref()
            .map(|(set, _)| set.nodes.iter().filter(|n| **n != self.me).cloned().collect());
        Elected { term, recorded }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::InSync;

    const TTL: Duration = Duration::from_secs(3);

    fn node(name: &str) -> NodeRecord {
        NodeRecord::named(name)
    }

    fn seen(leader: Option<(&str, u64, i64)>, in_sync: Option<(&[&str], i64)>) -> Result<Reply, EtcdError> {
        Ok(Reply::Seen(Seen {
            observation: Observation {
                leader: leader.map(|(name, term, _)| (node(name), term)),
                leader_lease: leader.map_or(0, |(_, _, lease)| lease),
                in_sync: in_sync.map(|(nodes, rev)| {
                    (InSync { term: 1, nodes: nodes.iter().map(|n| (*n).to_owned()).collect() }, rev)
                }),
            },
            live: vec![node("a"), node("b")],
            members: vec![node("a"), node("b"), node("c")],
        }))
    }

    fn following(start: Instant, holdoff: Option<Instant>) -> Following {
        let lease = HeldLease { id: 7, clock: LeaseClock::granted(TTL, start) };
        Following::new("b", TTL, lease, holdoff, 1)
    }

    fn unreachable() -> EtcdError {
        EtcdError::Unreachable("test".into())
    }

    #[test]
    fn each_round_looks_at_etcd_and_renews_the_lease_once_a_third_of_it_has_passed() {
        let start = Instant::now();
        let mut machine = following(start, None);
        assert_eq!(machine.wake(start).next, FollowNext::Ask(Request::Observe));
        let later = start + TTL / 3;
        assert_eq!(machine.answered(later, seen(Some(("a", 4, 1)), None)).next, FollowNext::Sleep(POLL));
        assert_eq!(machine.wake(later).next, FollowNext::Ask(Request::KeepAlive { lease: 7 }));
        assert_eq!(machine.answered(later, Ok(Reply::TtlLeft(3))).next, FollowNext::Ask(Request::Observe));
        assert_eq!(machine.lease().clock.valid_until(), LeaseClock::granted(TTL, later).valid_until());
    }

    #[test]
    fn an_expired_lease_is_replaced_by_a_new_registration() {
        let start = Instant::now();
        let mut machine = following(start, None);
        let later = start + TTL;
        machine.wake(later);
        assert_eq!(machine.answered(later, Ok(Reply::TtlLeft(0))).next, FollowNext::Ask(Request::Register));
        let step = machine.answered(later, Ok(Reply::Registered { lease: 9 }));
        assert_eq!(step.next, FollowNext::Ask(Request::Observe));
        assert_eq!(step.effects, vec![FollowEffect::Registered { lease: 9 }]);
        assert_eq!(machine.lease().id, 9);
    }

    #[test]
    fn a_node_follows_the_leader_etcd_names_and_says_when_it_changed() {
        let start = Instant::now();
        let mut machine = following(start, None);
        machine.wake(start);
        let step = machine.answered(start, seen(Some(("a", 4, 1)), Some((&["a", "b"], 5))));
        assert!(step.effects.contains(&FollowEffect::Follow { leader: node("a"), term: 4, changed: true }));
        machine.wake(start);
        let step = machine.answered(start, seen(Some(("a", 4, 1)), Some((&["a", "b"], 5))));
        assert!(step.effects.contains(&FollowEffect::Follow { leader: node("a"), term: 4, changed: false }));
    }

    #[test]
    fn an_unreachable_etcd_is_retried_with_a_growing_back_off_that_starts_over_after_an_answer() {
        let start = Instant::now();
        let mut machine = following(start, None);
        let mut pauses = Vec::new();
        for _ in 0..6 {
            machine.wake(start);
            match machine.answered(start, Err(unreachable())).next {
                FollowNext::Sleep(pause) => pauses.push(pause),
                other => panic!("{other:?}"),
            }
        }
        assert!(pauses[0] <= Duration::from_millis(250) && pauses[5] >= Duration::from_secs(2), "{pauses:?}");
        machine.wake(start);
        machine.answered(start, seen(Some(("a", 4, 1)), None));
        machine.wake(start);
        let FollowNext::Sleep(pause) = machine.answered(start, Err(unreachable())).next else { panic!() };
        assert!(pause <= Duration::from_millis(250), "{pause:?}");
    }

    #[test]
    fn an_in_sync_node_campaigns_against_the_set_it_read_and_leads_with_it() {
        let start = Instant::now();
        let mut machine = following(start, None);
        machine.wake(start);
        let step = machine.answered(start, seen(None, Some((&["a", "b"], 5))));
        assert_eq!(step.next, FollowNext::Ask(Request::Campaign { lease: 7, in_sync_revision: 5 }));
        let step = machine.answered(start, Ok(Reply::Won(Some(8))));
        assert_eq!(step.effects, vec![FollowEffect::Won { term: 8, answer_lost: false }]);
        let recorded = Some(["a".to_owned()].into_iter().collect());
        assert_eq!(step.next, FollowNext::Elected(Elected { term: 8, recorded }));
    }

    #[test]
    fn a_lost_campaign_answer_is_found_in_the_next_look() {
        let start = Instant::now();
        let mut machine = following(start, None);
        machine.wake(start);
        machine.answered(start, seen(None, None));
        assert_eq!(machine.answered(start, Err(unreachable())).next, FollowNext::Sleep(POLL));
        machine.wake(start);
        let step = machine.answered(start, seen(Some(("b", 8, 7)), None));
        assert_eq!(step.next, FollowNext::Elected(Elected { term: 8, recorded: None }));
    }

    /// Issue 38: a leader found dead (its stream ended, its port refuses) is deposed at once by
    /// deleting its term's key, and the election runs in the same round, instead of after its
    /// lease runs out. Only the leader followed, at its term.
    #[test]
    fn a_dead_leader_is_deposed_and_the_election_runs_at_once() {
        let start = Instant::now();
        let mut machine = following(start, None);
        machine.wake(start);
        machine.answered(start, seen(Some(("a", 4, 1)), Some((&["a", "b"], 5))));
        assert_eq!(machine.leader_gone("a", 3), None, "an older term");
        assert_eq!(machine.leader_gone("c", 4), None, "not the leader followed");
        let step = machine.leader_gone("a", 4).expect("the leader followed");
        assert_eq!(step.next, FollowNext::Ask(Request::GiveUp { term: 4 }));
        let step = machine.answered(start, Ok(Reply::Done(true)));
        assert_eq!(step.next, FollowNext::Ask(Request::Observe));
        assert_eq!(step.effects, vec![FollowEffect::Deposed { leader: "a".into(), term: 4, deposed: true }]);
        let step = machine.answered(start, seen(None, Some((&["a", "b"], 5))));
        assert_eq!(step.next, FollowNext::Ask(Request::Campaign { lease: 7, in_sync_revision: 5 }));
    }

    #[test]
    fn a_node_that_stepped_down_does_not_campaign_during_its_hold_off() {
        let start = Instant::now();
        let mut machine = following(start, Some(start + 2 * TTL));
        machine.wake(start);
        assert_eq!(machine.answered(start, seen(None, Some((&["b"], 5)))).next, FollowNext::Sleep(POLL));
        let after = start + 2 * TTL;
        assert_eq!(machine.wake(after).next, FollowNext::Ask(Request::KeepAlive { lease: 7 }));
        let step = machine.answered(after, Ok(Reply::TtlLeft(3)));
        assert_eq!(step.next, FollowNext::Ask(Request::Observe));
        let step = machine.answered(after, seen(None, Some((&["b"], 5))));
        assert_eq!(step.next, FollowNext::Ask(Request::Campaign { lease: 7, in_sync_revision: 5 }));
    }
}
