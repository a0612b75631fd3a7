//! Publisher-confirm bookkeeping (RabbitMQ's confirm extension): publish sequence numbers start
//! at 1 on confirm.select; basic.ack / basic.nack settle one tag or, with `multiple`, every tag
//! up to it. The window counts what is still unsettled.

use std::collections::VecDeque;

/// Unsettled publishes of one channel in confirm mode.
#[derive(Debug)]
pub struct Confirms {
    /// Sequence number of `settled.front()`.
    first_seq: u64,
    /// One entry per publish from `first_seq` on; true once settled (out of order is possible).
    settled: VecDeque<bool>,
    /// Entries of `settled` still false.
    unsettled: usize,
    pub acked: u64,
    pub nacked: u64,
}

impl Confirms {
    pub fn new() -> Confirms {
        Confirms { first_seq: 1, settled: VecDeque::new(), unsettled: 0, acked: 0, nacked: 0 }
    }

    /// Records one more publish.
    pub fn published(&mut self) {
        self.settled.push_back(false);
        self.unsettled += 1;
    }

    /// Applies a basic.ack (`nack = false`) or basic.nack from the broker. Tags outside the
    /// window (already settled, or never sent) are ignored.
    pub fn settle(&mut self, tag: u64, multiple: bool, nack: bool) {
        let Some(index) = tag.checked_sub(self.first_seq) else { return };
        let Ok(index) = usize::try_from(index) else { return };
        if index >= self.settled.len() {
            return;
        }
        let from = if multiple { 0 } else { index };
        for slot in self.settled.range_mut(from..=index) {
            if !*slot {
                *slot = true;
                self.unsettled -= 1;
                if nack {
                    self.nacked += 1;
                } else {
                    self.acked += 1;
                }
            }
        }
        while self.settled.front() == Some(&true) {
            self.settled.pop_front();
            self.first_seq += 1;
        }
    }

    /// Publishes not yet confirmed.
    pub fn outstanding(&self) -> usize {
        self.unsettled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A multiple ack settles every tag up to it, a single one only its own.
    #[test]
    fn multiple_ack_settles_up_to_the_tag() {
        let mut confirms = Confirms::new();
        for _ in 0..5 {
            confirms.published();
        }
        confirms.settle(4, false, false);
        assert_eq!(confirms.outstanding(), 4);
        confirms.settle(3, true, false);
        assert_eq!(confirms.outstanding(), 1);
        confirms.settle(5, false, true);
        assert_eq!((confirms.acked, confirms.nacked, confirms.outstanding()), (4, 1, 0));
    }

    /// Tags already settled or never sent change nothing.
    #[test]
    fn stale_and_unknown_tags_are_ignored() {
        let mut confirms = Confirms::new();
        confirms.published();
        confirms.settle(1, false, false);
        confirms.settle(1, true, false);
        confirms.settle(9, false, false);
        assert_eq!((confirms.acked, confirms.outstanding()), (1, 0));
    }
}
