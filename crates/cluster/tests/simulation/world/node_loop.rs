//! Each node's life and its coordinator: start, crash, restart; its etcd requests and their
//! answers; and what the crate's `Following` and `Leading` machines say to do, applied to the
//! node's fence and the simulated hub as the broker's coordinator applies them.

use std::collections::BTreeSet;
use std::time::Duration;

use hourglass_cluster::coordinator::{
    FollowEffect, FollowNext, FollowStep, Followers, LeadEffect, LeadNext, LeadStep, POLL,
};
use hourglass_cluster::etcd::EtcdError;
use hourglass_cluster::in_sync::Replicas;
use hourglass_cluster::lease::{HeldLease, LeaseClock};
use hourglass_cluster::Elected;

use super::*;

fn micros(span: Duration) -> Micros {
    span.as_micros() as Micros
}

/// The simulated hub as the leader's machine sees it: `last` is the leader's last record.
struct SimFollowers<'a> {
    hub: &'a mut Hub,
    last: u64,
}

impl Followers for SimFollowers<'_> {
    fn admit_caught_up(&mut self, now: Instant, lag_timeout: Duration) -> Vec<String> {
        let hub = &mut *self.hub;
        let ready: Vec<String> = hub
            .progress
            .iter()
            .filter(|(name, p)| p.caught_up(self.last, now, lag_timeout) && !hub.in_sync.contains(*name))
            .map(|(name, _)| name.clone())
            .collect();
        hub.in_sync.extend(ready.iter().cloned());
        ready
    }

    fn replicas(&self, now: Instant, lag_timeout: Duration) -> Replicas {
        let reachable = self
            .hub
            .progress
            .iter()
            .filter(|(_, p)| p.reachable(now, lag_timeout))
            .map(|(name, _)| name.clone())
            .collect();
        Replicas { in_sync: self.hub.in_sync.clone(), reachable }
    }
}

impl World {
    pub(super) fn restart(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.life += 1;
        node.down = false;
        node.machine = Machine::Joining { sent: None };
        node.asking = false;
        node.fence_max = 0;
        node.fence_leader = None;
        node.hub = None;
        node.path_clock.clear();
        let life = node.life;
        self.log(format!("{} starts", self.nodes[n].name));
        self.at(self.now, Event::Wake { node: n, life });
    }

    /// Node `n`'s process ends: the nodes following it with a path to it see its replication
    /// stream end (the kernel closes its sockets).
    fn streams_end(&mut self, n: usize) {
        for m in (0..3).filter(|m| *m != n) {
            let follows = self.nodes[m].fence_leader.filter(|(leader, _)| *leader == n);
            if let Some(followed) = follows.filter(|_| self.net.up(End::Node(m), End::Node(n))) {
                self.nodes[m].ended_stream = Some(followed);
            }
        }
    }

    /// Crashes node `n` (its process ends) for `down_for`.
    pub fn crash(&mut self, n: usize, down_for: Micros) {
        self.streams_end(n);
        self.nodes[n].down = true;
        self.nodes[n].life += 1;
        self.nodes[n].hub = None;
        self.log(format!("{} crashes for {} ms", self.nodes[n].name, down_for / MS));
        self.at(self.now + down_for, Event::Restart { node: n });
    }

    pub(super) fn sleep(&mut self, n: usize, local: Micros) {
        let life = self.nodes[n].life;
        let when = self.now + self.global(n, local);
        self.at(when, Event::Wake { node: n, life });
    }

    /// Sends `request` to etcd; its answer (or the timeout) comes back as a `Reply` event.
    pub(super) fn call(&mut self, n: usize, request: Request) {
        let node = &mut self.nodes[n];
        node.call += 1;
        node.asking = true;
        let (call, life) = (node.call, node.life);
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::EtcdArrives { node: n, life, call, request });
        }
        let timeout = self.now + self.global(n, ETCD_TIMEOUT);
        self.at(timeout, Event::Reply { node: n, life, call, reply: None });
    }

    pub(super) fn etcd_arrives(&mut self, n: usize, life: u64, call: u64, request: Request) {
        let reply = self.etcd.apply(n, &request, self.now);
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: n{n} {request:?} -> {reply:?}"));
        }
        if let (Request::Campaign { .. }, Reply::Won(Some(term))) = (&request, &reply) {
            self.elected_at.insert(*term, self.now);
            self.log(format!("etcd: {} elected, term {term}", self.nodes[n].name));
        }
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::Reply { node: n, life, call, reply: Some(reply) });
        } else if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: answer to n{n} lost (lost {lost})"));
        }
    }

    /// The start of a round of the node's machine.
    pub(super) fn iterate(&mut self, n: usize) -> Result<(), Violation> {
        if self.nodes[n].asking {
            return Ok(());
        }
        let now = self.clock(n);
        match &mut self.nodes[n].machine {
            Machine::Joining { sent } => {
                *sent = Some(now);
                self.call(n, Request::Register);
                Ok(())
            }
            Machine::Following(_) => {
                // The coordinator's probe: a crashed leader's port refuses while it is down.
                let dead = self.nodes[n].ended_stream.take().filter(|(leader, _)| self.nodes[*leader].down);
                let dead = dead.map(|(leader, term)| (self.nodes[leader].name.clone(), term));
                let Machine::Following(machine) = &mut self.nodes[n].machine else { return Ok(()) };
                let gone = dead.and_then(|(leader, term)| machine.leader_gone(&leader, term));
                let step = gone.unwrap_or_else(|| machine.wake(now));
                self.do_follow_step(n, step)
            }
            Machine::Leading(machine) => {
                let step = machine.wake(now);
                self.do_lead_step(n, step)
            }
        }
    }

    /// etcd's answer to the node's request (`None`: it timed out), handed to its machine.
    pub(super) fn answered(&mut self, n: usize, reply: Option<Reply>) -> Result<(), Violation> {
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("n{n} answered: {reply:?}"));
        }
        let now = self.clock(n);
        let reply = reply.ok_or_else(|| EtcdError::Unreachable("timed out".into()));
        let node = &mut self.nodes[n];
        match &mut node.machine {
            Machine::Joining { sent } => {
                let Ok(Reply::Registered { lease }) = reply else {
                    self.sleep(n, micros(POLL));
                    return Ok(());
                };
                let clock = LeaseClock::granted(Duration::from_micros(TTL), sent.unwrap_or(now));
                let seed = self.setup.seed ^ ((n as u64) << 32) ^ node.life;
                node.machine = Machine::Following(Following::new(
                    &node.name,
                    Duration::from_micros(TTL),
                    HeldLease { id: lease, clock },
                    node.campaign_not_before,
                    seed,
                ));
                self.iterate(n)
            }
            Machine::Following(machine) => {
                let step = machine.answered(now, reply);
                self.do_follow_step(n, step)
            }
            Machine::Leading(machine) => {
                let Some(hub) = node.hub.as_mut() else { return Ok(()) };
                let mut followers = SimFollowers { hub, last: node.log.len() as u64 };
                let step = machine.answered(now, reply, &mut followers);
                self.do_lead_step(n, step)
            }
        }
    }

    fn do_follow_step(&mut self, n: usize, step: FollowStep) -> Result<(), Violation> {
        for effect in step.effects {
            match effect {
                FollowEffect::Follow { leader, term, changed } => {
                    let i: usize = leader.name[1..].parse().expect("a node name n<i>");
                    if changed {
                        self.log(format!("{} follows n{i} (term {term})", self.nodes[n].name));
                    }
                    let node = &mut self.nodes[n];
                    if node.fence_max <= term {
                        node.fence_max = term;
                        node.fence_leader = Some((i, term));
                    }
                }
                FollowEffect::Won { term, .. } => {
                    let node = &mut self.nodes[n];
                    node.fence_max = node.fence_max.max(term);
                }
                FollowEffect::Registered { lease } => {
                    self.log(format!("{} registers again (lease {lease})", self.nodes[n].name))
                }
                FollowEffect::Deposed { leader, term, deposed } => {
                    self.log(format!("{} deposes {leader} (term {term}): {deposed}", self.nodes[n].name))
                }
                FollowEffect::Seen(_) | FollowEffect::NoLeader => {}
            }
        }
        match step.next {
            FollowNext::Ask(request) => self.call(n, request),
            FollowNext::Sleep(pause) => self.sleep(n, micros(pause)),
            FollowNext::Elected(elected) => return self.start_leading(n, &elected),
        }
        Ok(())
    }

    fn do_lead_step(&mut self, n: usize, step: LeadStep) -> Result<(), Violation> {
        for effect in step.effects {
            let name = self.nodes[n].name.clone();
            let Some(hub) = self.nodes[n].hub.as_mut() else { return Ok(()) };
            match effect {
                LeadEffect::LeaseUntil(until) => hub.lease_until = until,
                LeadEffect::MinInSync(min) => hub.min = min,
                LeadEffect::Recorded { nodes, removed, .. } => {
                    hub.recorded = Some(nodes.iter().skip(1).cloned().collect());
                    for name in &removed {
                        hub.in_sync.remove(name);
                    }
                    self.log(format!("{name} records in-sync {nodes:?}"));
                }
                LeadEffect::Deposed => {
                    hub.deposed = true;
                    self.log(format!("{name} cut off: gives up its term"));
                }
                // Replication to every node runs from the start of the term.
                LeadEffect::Link(_) | LeadEffect::Seen(_) | LeadEffect::Admitted(_) => {}
            }
        }
        self.try_confirm(n)?;
        match step.next {
            LeadNext::Ask(request) => self.call(n, request),
            LeadNext::Sleep(pause) => self.sleep(n, micros(pause)),
            LeadNext::SteppedDown(why) => self.step_down(n, &why.to_string()),
        }
        Ok(())
    }

    pub(super) fn start_leading(&mut self, n: usize, elected: &Elected) -> Result<(), Violation> {
        let me = self.nodes[n].name.clone();
        let now = self.clock(n);
        let Machine::Following(following) = &self.nodes[n].machine else { return Ok(()) };
        let lease = following.lease();
        let term = elected.term;
        let recorded: Option<BTreeSet<String>> = elected.recorded.clone();
        let node = &mut self.nodes[n];
        node.fence_max = node.fence_max.max(term);
        node.machine =
            Machine::Leading(Leading::new(&me, elected, lease, Duration::from_micros(TTL), 2, None, now));
        node.hub = Some(Hub {
            term,
            progress: BTreeMap::new(),
            in_sync: BTreeSet::new(),
            recorded,
            lease_until: lease.clock.valid_until(),
            deposed: false,
            confirmed: node.log.len(),
            min: 2,
        });
        let log = node.log.clone();
        let life = node.life;
        self.log(format!("{me} leads term {term} with {} records", log.len()));
        for (term_before, record, _) in &self.confirms {
            if *term_before < term && log.binary_search(record).is_err() {
                return Err(self.violation(format!(
                    "record {record} confirmed in term {term_before} is missing from {me}, leader of term {term}"
                )));
            }
        }
        self.leaders.push((term, log));
        self.at(self.now, Event::Replicate { leader: n, life });
        self.sleep(n, 0);
        Ok(())
    }

    pub(super) fn step_down(&mut self, n: usize, why: &str) {
        self.log(format!("{} steps down: {why}", self.nodes[n].name));
        if let Some(hub) = self.nodes[n].hub.as_mut() {
            hub.deposed = true;
        }
        self.restart_later(n);
    }

    /// The process replaces itself: a new life after a moment, holding off its campaigns.
    pub(super) fn restart_later(&mut self, n: usize) {
        self.streams_end(n);
        self.nodes[n].down = true;
        self.nodes[n].life += 1;
        self.nodes[n].hub = None;
        let holdoff = self.clock(n) + Duration::from_micros(HOLDOFF);
        self.nodes[n].campaign_not_before = Some(holdoff);
        self.at(self.now + RESTART, Event::Restart { node: n });
    }
}
