//! Each node's life and its coordinator loop: start, crash, restart; its etcd requests and their
//! answers; following, campaigning, leading and stepping down, by the crate's rules.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

impl World {
    pub(super) fn restart(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.life += 1;
        node.down = false;
        node.lease = None;
        node.fence_max = 0;
        node.fence_leader = None;
        node.hub = None;
        node.awaiting = Await::Nothing;
        node.path_clock.clear();
        let life = node.life;
        self.log(format!("{} starts", self.nodes[n].name));
        self.at(self.now, Event::Wake { node: n, life });
    }

    pub(super) fn crash(&mut self, n: usize, down_for: Micros) {
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

    pub(super) fn call(&mut self, n: usize, op: Op, awaiting: Await) {
        let node = &mut self.nodes[n];
        node.call += 1;
        node.awaiting = awaiting;
        let (call, life) = (node.call, node.life);
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::EtcdArrives { node: n, life, call, op });
        }
        let timeout = self.now + self.global(n, ETCD_TIMEOUT);
        self.at(timeout, Event::Reply { node: n, life, call, answer: None });
    }

    pub(super) fn etcd_arrives(&mut self, n: usize, life: u64, call: u64, op: Op) {
        let answer = self.etcd.apply(n, &op, self.now);
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: n{n} {op:?} -> {answer:?}"));
        }
        if let (Op::Campaign { .. }, Answer::Won(Some(term))) = (&op, &answer) {
            self.elected_at.insert(*term as u64, self.now);
            self.log(format!("etcd: {} elected, term {term}", self.nodes[n].name));
        }
        let lost = self.rng.chance(self.setup.etcd_loss_per_mille);
        let delay = self.rng.between(200, 30 * MS);
        if !lost && self.net.up(End::Node(n), End::Etcd) {
            self.at(self.now + delay, Event::Reply { node: n, life, call, answer: Some(answer) });
        } else if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("etcd: answer to n{n} lost (lost {lost})"));
        }
    }

    /// The start of one loop iteration: the lease first, as the coordinator does.
    pub(super) fn iterate(&mut self, n: usize) {
        if self.nodes[n].awaiting != Await::Nothing {
            return;
        }
        let now = self.clock(n);
        match self.nodes[n].lease {
            None => self.call(n, Op::Join, Await::Join),
            Some((lease, clock)) if clock.renewal_due(now) => {
                self.call(n, Op::KeepAlive { lease }, Await::KeepAlive { sent: now })
            }
            Some(_) => self.after_lease(n),
        }
    }

    pub(super) fn after_lease(&mut self, n: usize) {
        if self.nodes[n].hub.is_none() {
            return self.call(n, Op::Observe, Await::Observe);
        }
        let now = self.clock(n);
        let holds = self.nodes[n].lease.is_some_and(|(_, clock)| clock.holds(now));
        if !holds {
            return self.step_down(n, "lease lost");
        }
        self.call(n, Op::GetLeader, Await::LeaderKey);
    }

    pub(super) fn answered(&mut self, n: usize, answer: Option<Answer>) -> Result<(), Violation> {
        let awaiting = std::mem::replace(&mut self.nodes[n].awaiting, Await::Nothing);
        if std::env::var_os("HOURGLASS_SIM_VERBOSE").is_some() {
            self.log(format!("n{n} answered {awaiting:?}: {answer:?}"));
        }
        let now = self.clock(n);
        match (awaiting, answer) {
            (Await::Join, Some(Answer::Joined { lease })) => {
                self.nodes[n].lease = Some((lease, LeaseClock::granted(Duration::from_micros(TTL), now)));
                self.after_lease(n);
            }
            (Await::KeepAlive { sent }, Some(Answer::TtlLeft(left))) if left > 0 => {
                if let Some((_, clock)) = self.nodes[n].lease.as_mut() {
                    clock.renewed(sent, Duration::from_secs(left));
                }
                self.after_lease(n);
            }
            (Await::KeepAlive { .. }, Some(Answer::TtlLeft(_))) => {
                self.nodes[n].lease = None;
                match self.nodes[n].hub.is_some() {
                    true => self.step_down(n, "lease expired"),
                    false => self.sleep(n, POLL),
                }
            }
            (Await::Observe, Some(Answer::Seen { leader, in_sync, alive: _ })) => {
                self.observed(n, leader, in_sync)?
            }
            (Await::Campaign { seen }, Some(Answer::Won(Some(term)))) => {
                self.start_leading(n, term as u64, &seen)?
            }
            (Await::LeaderKey, Some(Answer::Leader(key))) => {
                let term = self.nodes[n].hub.as_ref().map(|hub| hub.term as i64);
                match key {
                    Some((_, rev)) if Some(rev) == term => self.call(n, Op::Observe, Await::Alive),
                    _ => self.step_down(n, "superseded or key gone"),
                }
            }
            (Await::Alive, Some(Answer::Seen { alive, .. })) => self.maintain_in_sync(n, &alive)?,
            (Await::PutInSync { set, removed }, Some(Answer::Done(true))) => {
                self.log(format!("{} records in-sync {set:?}", self.nodes[n].name));
                if let Some(hub) = self.nodes[n].hub.as_mut() {
                    hub.rules.recorded(&set);
                    hub.recorded = Some(set.iter().skip(1).cloned().collect());
                    for name in &removed {
                        hub.in_sync.remove(name);
                    }
                }
                self.try_confirm(n)?;
                self.sleep(n, POLL);
            }
            (Await::PutInSync { .. }, Some(Answer::Done(false))) => self.step_down(n, "superseded"),
            (Await::GiveUp, _) => self.restart_later(n),
            (awaiting, _) => {
                // A timeout, a lost reply, a lost campaign: the loop goes on.
                let leading = self.nodes[n].hub.is_some();
                if leading && matches!(awaiting, Await::KeepAlive { .. }) {
                    self.after_lease(n);
                    return Ok(());
                }
                self.sleep(n, POLL);
            }
        }
        Ok(())
    }

    pub(super) fn observed(
        &mut self,
        n: usize,
        leader: Option<(usize, i64, i64)>,
        in_sync: Option<(Vec<String>, i64)>,
    ) -> Result<(), Violation> {
        let record = |i: usize| NodeRecord {
            name: format!("n{i}"),
            host: String::new(),
            amqp_port: 0,
            http_port: 0,
            replication_port: 0,
            amqps_port: None,
            https_port: None,
        };
        let seen = Observation {
            leader: leader.map(|(i, term, _)| (record(i), term as u64)),
            leader_lease: leader.map_or(0, |(_, _, lease)| lease),
            in_sync: in_sync.map(|(nodes, rev)| (InSync { term: 0, nodes }, rev)),
        };
        let my_lease = self.nodes[n].lease.map_or(0, |(id, _)| id);
        match decide(&self.nodes[n].name, my_lease, &seen) {
            Decision::Lead(term) => return self.start_leading(n, term, &seen),
            Decision::Follow(_, term) => {
                let (i, _, _) = leader.expect("a leader to follow");
                if self.nodes[n].fence_leader != Some((i, term)) {
                    self.log(format!("{} follows n{i} (term {term})", self.nodes[n].name));
                }
                let node = &mut self.nodes[n];
                if node.fence_max <= term {
                    node.fence_max = term;
                    node.fence_leader = Some((i, term));
                }
                self.sleep(n, POLL);
            }
            Decision::Campaign { .. }
                if self.nodes[n].campaign_not_before.is_some_and(|at| self.clock(n) < at) =>
            {
                self.sleep(n, POLL)
            }
            Decision::Campaign { in_sync_revision } => {
                let lease = self.nodes[n].lease.map(|(id, _)| id).unwrap_or(0);
                self.call(n, Op::Campaign { lease, in_sync_revision }, Await::Campaign { seen })
            }
            Decision::Wait => self.sleep(n, POLL),
        }
        Ok(())
    }

    pub(super) fn start_leading(&mut self, n: usize, term: u64, seen: &Observation) -> Result<(), Violation> {
        let me = self.nodes[n].name.clone();
        let recorded: Option<BTreeSet<String>> =
            seen.in_sync.as_ref().map(|(set, _)| set.nodes.iter().filter(|x| **x != me).cloned().collect());
        let inherited = recorded.clone().map(|mut set| {
            set.insert(me.clone());
            set
        });
        let lease_until = self.nodes[n].lease.map(|(_, c)| c.valid_until()).unwrap_or(self.clock(n));
        let grace_until = self.clock(n) + Duration::from_micros(TTL);
        let node = &mut self.nodes[n];
        node.fence_max = node.fence_max.max(term);
        node.hub = Some(Hub {
            term,
            rules: InSyncRules::new(&me, inherited, 2, Duration::from_micros(TTL / 3), grace_until),
            progress: BTreeMap::new(),
            in_sync: BTreeSet::new(),
            recorded,
            lease_until,
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

    pub(super) fn maintain_in_sync(&mut self, n: usize, alive: &BTreeSet<String>) -> Result<(), Violation> {
        let now = self.clock(n);
        let last = self.nodes[n].log.len() as u64;
        let lease_until = self.nodes[n].lease.map(|(_, c)| c.valid_until());
        let Some(hub) = self.nodes[n].hub.as_mut() else { return Ok(()) };
        if let Some(until) = lease_until {
            hub.lease_until = until;
        }
        let ready: Vec<String> = hub
            .progress
            .iter()
            .filter(|(name, p)| {
                p.caught_up(last, now, Duration::from_micros(TTL)) && !hub.in_sync.contains(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        hub.in_sync.extend(ready);
        let reachable = hub
            .progress
            .iter()
            .filter(|(_, p)| p.reachable(now, Duration::from_micros(TTL)))
            .map(|(name, _)| name.clone())
            .collect();
        let replicas = Replicas { in_sync: hub.in_sync.clone(), reachable };
        let term = hub.term as i64;
        match hub.rules.next(now, &replicas, alive) {
            InSyncStep::Keep => {
                self.try_confirm(n)?;
                self.sleep(n, POLL);
            }
            InSyncStep::StepDown { unreachable } => {
                self.log(format!("{} cut off from {unreachable:?}", self.nodes[n].name));
                self.depose(n);
                self.call(n, Op::DeleteLeaderIf { term }, Await::GiveUp);
            }
            InSyncStep::Record { set, removed } => {
                self.try_confirm(n)?;
                self.call(
                    n,
                    Op::PutInSyncIfLeader { term, set: set.clone() },
                    Await::PutInSync { set, removed },
                )
            }
        }
        Ok(())
    }

    pub(super) fn depose(&mut self, n: usize) {
        if let Some(hub) = self.nodes[n].hub.as_mut() {
            hub.deposed = true;
        }
    }

    pub(super) fn step_down(&mut self, n: usize, why: &str) {
        self.log(format!("{} steps down: {why}", self.nodes[n].name));
        self.depose(n);
        self.restart_later(n);
    }

    /// The process replaces itself: a new life after a moment, holding off its campaigns.
    pub(super) fn restart_later(&mut self, n: usize) {
        self.nodes[n].down = true;
        self.nodes[n].life += 1;
        self.nodes[n].hub = None;
        let holdoff = self.clock(n) + Duration::from_micros(HOLDOFF);
        self.nodes[n].campaign_not_before = Some(holdoff);
        self.at(self.now + RESTART, Event::Restart { node: n });
    }
}
