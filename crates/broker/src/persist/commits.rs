//! A 2xx means durable (issue #22, finding 3): the management API learns when the definition
//! changes (and other ops) of one of its jobs are durable, and whether the catalog refused one.
//!
//! The API runs a job through [`Broker::with_commit_notice_since`], which notes the ops the job
//! (or a run of jobs) produced and calls the job's notice once they are all durable (`handle_persisted`): with
//! `Ok`, or with the refusal the driver reported for one of them (`handle_catalog_refused`, sent
//! by the store thread before the `Persisted` that covers it). A job that produced nothing, or a
//! broker without persistence, is noticed at once. The notice is the caller's way back (a oneshot
//! sender in `hourglass-mgmt`), handed in like the job itself; the broker keeps it as data.

use crate::broker::Broker;

/// A definition change the catalog refused to store: it lives in memory only and would not
/// survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the definition change could not be stored (op {op_seq}): {reason}")]
pub struct DefinitionNotStored {
    pub op_seq: u64,
    pub reason: String,
}

/// Called once with whether every op of a job became durable.
pub type CommitNotice = Box<dyn FnOnce(Result<(), DefinitionNotStored>) + Send>;

/// The last refusals are kept, for a caller that waits for a range of jobs (an import) after
/// some of them became durable; this many at most (each a key's worth of text). The limits on
/// definitions keep refusals from happening at all.
const REFUSALS_KEPT_MAX: usize = 1024;

/// Jobs waiting for their ops, and the refusals they may be told about.
#[derive(Default)]
pub(crate) struct CommitNotices {
    /// (first op after the job's start, last op of the job, notice), in job order.
    waiting: Vec<(u64, u64, CommitNotice)>,
    refused: Vec<DefinitionNotStored>,
}

impl std::fmt::Debug for CommitNotices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitNotices")
            .field("waiting", &self.waiting.len())
            .field("refused", &self.refused)
            .finish()
    }
}

impl CommitNotices {
    fn refusal_in(&self, first: u64, last: u64) -> Option<DefinitionNotStored> {
        self.refused.iter().find(|r| (first..=last).contains(&r.op_seq)).cloned()
    }
}

impl Broker {
    /// The op_seq of the last store op emitted (0 before any).
    pub fn op_seq(&self) -> u64 {
        self.persist.last_op_seq()
    }

    /// Runs `f`, then calls `notice` once every op emitted from `first` on (those of `f`, and of
    /// earlier jobs the caller started at `first`) is durable: `Err` if the catalog refused one
    /// of them. At once when there are none or persistence is off.
    pub fn with_commit_notice_since<T>(
        &mut self,
        first: u64,
        f: impl FnOnce(&mut Broker) -> T,
        notice: CommitNotice,
    ) -> T {
        let value = f(self);
        if !self.persist.enabled {
            notice(Ok(()));
            return value;
        }
        self.flush_definitions();
        let last = self.persist.last_op_seq();
        let notices = &mut self.persist.commit_notices;
        if last < first {
            notice(Ok(()));
        } else if last <= self.persist.durable_through {
            notice(notices.refusal_in(first, last).map_or(Ok(()), Err));
        } else {
            notices.waiting.push((first, last, notice));
        }
        value
    }

    /// The driver: the catalog refused the change of op `op_seq` (report it before the
    /// `handle_persisted` that covers it).
    pub fn handle_catalog_refused(&mut self, refusal: DefinitionNotStored) {
        let refused = &mut self.persist.commit_notices.refused;
        if refused.len() >= REFUSALS_KEPT_MAX {
            refused.remove(0);
        }
        refused.push(refusal);
    }

    /// Calls the notices of jobs whose ops are all durable now (from `handle_persisted`).
    pub(crate) fn notify_commits(&mut self) {
        let durable = self.persist.durable_through;
        let notices = &mut self.persist.commit_notices;
        let waiting = std::mem::take(&mut notices.waiting);
        for (first, last, notice) in waiting {
            if last <= durable {
                notice(notices.refusal_in(first, last).map_or(Ok(()), Err));
            } else {
                notices.waiting.push((first, last, notice));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use hourglass_wire::{QueueDeclare, ShortStr};

    use super::*;
    use crate::{BrokerConfig, Timestamp};

    type Seen = Arc<Mutex<Vec<Result<(), DefinitionNotStored>>>>;

    fn recorder() -> (Seen, impl Fn() -> CommitNotice) {
        let seen: Seen = Arc::default();
        let make = {
            let seen = seen.clone();
            move || -> CommitNotice {
                let seen = seen.clone();
                Box::new(move |r| seen.lock().unwrap().push(r))
            }
        };
        (seen, make)
    }

    fn declare(broker: &mut Broker, name: &'static str) {
        let m = QueueDeclare { queue: ShortStr::from_static(name), durable: true, ..Default::default() };
        broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(m)).unwrap();
    }

    /// A durable declare is noticed only once its ops are durable, with the refusal the store
    /// reported for them; a job that wrote nothing is noticed at once.
    #[test]
    fn a_job_is_noticed_when_its_ops_are_durable_with_any_refusal() {
        let mut broker = Broker::new(BrokerConfig { persistence: true, ..BrokerConfig::default() });
        let (seen, notice) = recorder();
        broker.with_commit_notice_since(broker.op_seq() + 1, |_| (), notice());
        assert_eq!(seen.lock().unwrap().as_slice(), &[Ok(())], "nothing written: at once");

        broker.with_commit_notice_since(broker.op_seq() + 1, |b| declare(b, "kept"), notice());
        let kept_through = broker.persist.last_op_seq();
        broker.with_commit_notice_since(broker.op_seq() + 1, |b| declare(b, "refused"), notice());
        let last = broker.persist.last_op_seq();
        assert_eq!(seen.lock().unwrap().len(), 1, "nothing durable yet");

        broker.handle_persisted(kept_through, Timestamp::ZERO);
        assert_eq!(seen.lock().unwrap().as_slice(), &[Ok(()), Ok(())]);
        let refusal = DefinitionNotStored { op_seq: last, reason: "too large".into() };
        broker.handle_catalog_refused(refusal.clone());
        broker.handle_persisted(last, Timestamp::ZERO);
        assert_eq!(seen.lock().unwrap().as_slice(), &[Ok(()), Ok(()), Err(refusal)]);
        // An import that started before both declares learns of the refusal after the fact.
        broker.with_commit_notice_since(1, |_| (), notice());
        assert!(seen.lock().unwrap()[3].is_err());
    }
}
