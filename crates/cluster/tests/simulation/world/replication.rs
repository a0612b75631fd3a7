//! Publishes on the leader, the replication of its log to the followers, their acks, and the
//! confirms, each checked against both invariants.

use super::*;

impl World {
    pub(super) fn publish(&mut self) -> Result<(), Violation> {
        let publishing = if self.traffic { 0..3 } else { 0..0 };
        for n in publishing {
            let paused = self.nodes[n].paused_until > self.now;
            let leading = self.nodes[n].hub.as_ref().is_some_and(|hub| !hub.deposed);
            if leading && !self.nodes[n].down && !paused {
                let record = self.next_record;
                self.next_record += 1;
                self.nodes[n].append(record);
                self.try_confirm(n)?;
            }
        }
        self.at(self.now + PUBLISH_EVERY, Event::Publish);
        Ok(())
    }

    pub(super) fn replicate(&mut self, n: usize) {
        let Some(hub) = self.nodes[n].hub.as_ref() else { return };
        if hub.deposed {
            return;
        }
        let term = hub.term;
        let heartbeat = (self.now / REPLICATE_EVERY).is_multiple_of(HEARTBEAT_EVERY / REPLICATE_EVERY);
        let mut sends = Vec::new();
        for to in (0..3).filter(|to| *to != n) {
            let name = &self.nodes[to].name;
            let progress = hub.progress.get(name).copied().unwrap_or_default();
            // A new link starts over from the files; a live one sends what the follower lacks.
            let base = if progress.connected { progress.acked as usize } else { 0 };
            let base = base.min(self.nodes[n].log.len());
            // Nothing new: every 500 ms the empty delta is the heartbeat the follower answers.
            if progress.connected && base == self.nodes[n].log.len() && !heartbeat {
                continue;
            }
            let base_hash = if base == 0 { 0 } else { self.nodes[n].hashes[base - 1] };
            let entries = self.nodes[n].log[base..].to_vec();
            sends.push(Delta { from: n, to, term, base, base_hash, entries });
        }
        for delta in sends {
            if let Some(when) = self.path_delivery(delta.from, delta.to) {
                self.at(when, Event::Entries(delta));
            }
        }
        let life = self.nodes[n].life;
        self.at(self.now + REPLICATE_EVERY, Event::Replicate { leader: n, life });
    }

    pub(super) fn path_delivery(&mut self, from: usize, to: usize) -> Option<Micros> {
        if !self.net.up(End::Node(from), End::Node(to)) {
            return None;
        }
        let delay = self.rng.between(100, 5 * MS);
        let last = self.nodes[from].path_clock.get(&to).copied().unwrap_or(0);
        let when = (self.now + delay).max(last);
        self.nodes[from].path_clock.insert(to, when);
        Some(when)
    }

    /// A follower takes `delta` if it follows its sender at that term and holds the prefix the
    /// sender assumed; either way it answers.
    pub(super) fn entries(&mut self, delta: Delta) {
        let Delta { from, to, term, base, base_hash, entries } = delta;
        let node = &self.nodes[to];
        let named = node.fence_leader == Some((from, term)) && node.fence_max == term;
        // Not the prefix the leader assumed: it starts this link over from the files.
        let prefix_differs = base > 0 && node.hashes.get(base - 1) != Some(&base_hash);
        let reply = if node.down || node.hub.is_some() || !named || prefix_differs {
            Event::Refused { from: to, to: from, term }
        } else {
            let node = &mut self.nodes[to];
            node.log.truncate(base);
            node.hashes.truncate(base);
            for record in entries {
                node.append(record);
            }
            Event::Ack { from: to, to: from, term, seq: node.log.len() }
        };
        if let Some(when) = self.path_delivery(to, from) {
            self.at(when, reply);
        }
    }

    pub(super) fn acked(&mut self, from: usize, to: usize, term: u64, seq: usize) -> Result<(), Violation> {
        let now = self.clock(to);
        let name = self.nodes[from].name.clone();
        let Some(hub) = self.nodes[to].hub.as_mut().filter(|hub| hub.term == term && !hub.deposed) else {
            return Ok(());
        };
        let progress = hub.progress.entry(name).or_default();
        if !progress.connected {
            progress.on_connect(now);
        }
        progress.on_ack(seq as u64, true, now);
        self.try_confirm(to)
    }

    pub(super) fn try_confirm(&mut self, n: usize) -> Result<(), Violation> {
        let now = self.clock(n);
        let node = &mut self.nodes[n];
        let Some(hub) = node.hub.as_mut() else { return Ok(()) };
        if hub.deposed || now >= hub.lease_until {
            return Ok(());
        }
        let mut newly = Vec::new();
        while hub.confirmed < node.log.len() {
            let seq = hub.confirmed as u64 + 1;
            let acked = |name: &str| hub.progress.get(name).map(|p| p.acked);
            if !may_confirm(seq, hub.min, &hub.in_sync, hub.recorded.as_ref(), acked) {
                break;
            }
            newly.push(node.log[hub.confirmed]);
            hub.confirmed += 1;
        }
        let term = hub.term;
        for record in newly {
            self.confirmed(term, record)?;
        }
        Ok(())
    }

    pub(super) fn confirmed(&mut self, term: u64, record: u64) -> Result<(), Violation> {
        for (later, log) in &self.leaders {
            if *later > term && log.binary_search(&record).is_err() {
                return Err(self.violation(format!(
                    "record {record} confirmed in term {term} is missing from term {later}"
                )));
            }
        }
        if let Some(elected) = self.elected_at.iter().find(|(t, at)| **t > term && **at <= self.now) {
            return Err(self.violation(format!(
                "term {term} confirmed record {record} after term {} was elected at {} us",
                elected.0, elected.1
            )));
        }
        self.confirms.push((term, record, self.now));
        self.last_confirm = self.now;
        Ok(())
    }

    pub(super) fn violation(&self, what: String) -> Violation {
        let mut trace = self.trace.clone();
        trace.push(format!("{:>9.3}s VIOLATION: {what}", self.now as f64 / SECOND as f64));
        Violation { what, trace }
    }
}
