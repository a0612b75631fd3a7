//! The faults a run injects (cuts, isolation, pauses, crashes, quiet spells) and the ones a
//! scripted test makes itself.

use super::*;

impl World {
    /// Clients publish (`true`) or stay quiet.
    pub fn set_traffic(&mut self, on: bool) {
        self.traffic = on;
    }

    /// Cuts `node` from every other node and from etcd.
    pub fn isolate(&mut self, node: usize) {
        self.cut_from_peers(node);
        self.net.cut(End::Node(node), End::Etcd);
    }

    /// A follower of the current leader (the first by index).
    pub fn a_follower(&self) -> Option<usize> {
        let leader = self.leader_now()?;
        (0..3).find(|n| *n != leader)
    }

    /// Cuts the paths between `node` and every other node (etcd reachable).
    pub fn cut_from_peers(&mut self, node: usize) {
        for other in (0..3).filter(|o| *o != node) {
            self.net.cut(End::Node(node), End::Node(other));
        }
    }

    pub(super) fn fault(&mut self) {
        let node = self.rng.between(0, 2) as usize;
        let other = (node + 1 + self.rng.between(0, 1) as usize) % 3;
        let target = if self.rng.chance(500) { self.leader_now().unwrap_or(node) } else { node };
        let lasting = self.rng.between(300 * MS, 8 * SECOND);
        match self.rng.between(0, 9) {
            0 => {
                self.net.cut(End::Node(target), End::Etcd);
                self.log(format!("cut n{target} from etcd"));
            }
            1 => {
                self.cut_from_peers(target);
                self.log(format!("cut n{target} from its peers"));
            }
            2 => {
                self.cut_from_peers(target);
                self.net.cut(End::Node(target), End::Etcd);
                self.log(format!("isolate n{target}"));
            }
            3 => {
                self.net.cut(End::Node(node), End::Node(other));
                self.log(format!("cut n{node} from n{other}"));
            }
            4 => {
                // A second SIGSTOP does not shorten the first (and events keep their order).
                let until = self.nodes[target].paused_until.max(self.now + lasting);
                self.nodes[target].paused_until = until;
                self.log(format!("pause n{target} for {} ms", lasting / MS));
            }
            5 => self.crash(target, lasting),
            6 => {
                for n in 0..3 {
                    self.net.cut(End::Node(n), End::Etcd);
                }
                self.log("etcd unreachable".into());
            }
            8 => {
                self.traffic = !self.traffic;
                self.log(format!("traffic {}", if self.traffic { "on" } else { "off" }));
            }
            _ => {
                self.net.heal_all();
                self.log("heal".into());
            }
        }
        let next = self.now + self.rng.between(200 * MS, 4 * SECOND);
        if next < self.setup.faults_until {
            self.at(next, Event::Fault);
        }
    }
}
