//! Reads the broker asks for (its far tiers' spill runs, its queues' paged messages), performed on
//! tokio's blocking threads: a read may wait on the disk, the broker task must not. A bounded
//! number run at once, so what was read and not yet taken by the broker stays bounded however
//! many queues ask; the others wait here, in order.

use std::collections::VecDeque;

use tokio::sync::mpsc;

use crate::supervise::panic_message;

/// Reads of kind `R`, each answered with a `T`.
pub struct BlockingReads<R, T> {
    waiting: VecDeque<R>,
    in_flight: usize,
    at_once: usize,
    done: mpsc::UnboundedSender<(R, T)>,
    /// Unbounded: at most `at_once` outcomes are ever in it.
    outcomes: mpsc::UnboundedReceiver<(R, T)>,
}

impl<R: Send + 'static, T: Send + 'static> BlockingReads<R, T> {
    /// Performs at most `at_once` reads at a time (at least one).
    pub fn new(at_once: usize) -> Self {
        let (done, outcomes) = mpsc::unbounded_channel();
        BlockingReads { waiting: VecDeque::new(), in_flight: 0, at_once: at_once.max(1), done, outcomes }
    }

    /// Queues `reads`, after those already waiting.
    pub fn queue(&mut self, reads: impl IntoIterator<Item = R>) {
        self.waiting.extend(reads);
    }

    /// Starts what the bound allows, each read performed by the `perform` that `performer`
    /// makes (only made when a read starts). A read that panics is answered by `failed` with
    /// the panic's message, never left unanswered: its asker would wait for ever, and this
    /// would be one read short of its bound.
    pub fn start<P>(&mut self, performer: impl FnOnce() -> P, failed: fn(&R, String) -> T)
    where
        P: Fn(&R) -> T + Clone + Send + 'static,
    {
        if self.waiting.is_empty() || self.in_flight >= self.at_once {
            return;
        }
        let perform = performer();
        while self.in_flight < self.at_once {
            let Some(read) = self.waiting.pop_front() else { break };
            let (perform, done) = (perform.clone(), self.done.clone());
            self.in_flight += 1;
            tokio::task::spawn_blocking(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| perform(&read)))
                    .unwrap_or_else(|panic| failed(&read, panic_message(&*panic)));
                // The receiver lives as long as the broker task.
                let _ = done.send((read, outcome));
            });
        }
    }

    /// The next read's outcome (cancel-safe: nothing is lost if another branch wins).
    pub async fn outcome(&mut self) -> Option<(R, T)> {
        let outcome = self.outcomes.recv().await;
        self.in_flight -= usize::from(outcome.is_some());
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every read is answered, a panicking one by `failed`, and no more than the bound run
    /// at once.
    #[tokio::test]
    async fn every_read_is_answered_within_the_bound() {
        let mut reads: BlockingReads<u32, Result<u32, String>> = BlockingReads::new(2);
        reads.queue([1, 2, 3, 4]);
        let failed: fn(&u32, String) -> Result<u32, String> = |_, panic| Err(panic);
        let perform = || |&n: &u32| if n == 3 { panic!("three") } else { Ok(n * 10) };
        let mut answered = Vec::new();
        while answered.len() < 4 {
            reads.start(perform, failed);
            assert!(reads.in_flight <= 2);
            answered.push(reads.outcome().await.expect("an outcome"));
        }
        answered.sort_by_key(|(n, _)| *n);
        assert_eq!(answered[..2], [(1, Ok(10)), (2, Ok(20))]);
        assert_eq!(answered[2], (3, Err("panicked: three".to_owned())));
        assert_eq!(answered[3], (4, Ok(40)));
    }
}
