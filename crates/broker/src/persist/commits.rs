//! A 2xx means durable (issue #22, finding 3): the management API learns when the definition
//! changes (and other ops) of one of its requests are durable, and whether the catalog refused
//! one.
//!
//! After a request ran, [`Broker::notice_when_durable_since`] notes the ops it (or a run of
//! requests) produced under the driver's ticket, and [`Notice::Durable`] for that ticket comes
//! once they are all durable (`handle_persisted`): with `Ok`, or with the refusal the driver
//! reported for one of them (`handle_catalog_refused`, sent by the store thread before the
//! `Persisted` that covers it). A request that produced nothing, or a broker without
//! persistence, is noticed at once. The broker keeps the ticket; the driver keeps who waits on
//! it (`hourglass-mgmt`'s `jobs.rs`).

use crate::broker::Broker;
use crate::notices::{Notice, Ticket};

/// A definition change the catalog refused to store: it lives in memory only and would not
/// survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the definition change could not be stored (op {op_seq}): {reason}")]
pub struct DefinitionNotStored {
    pub op_seq: u64,
    pub reason: String,
}

/// The last refusals are kept, for a caller that waits for a range of jobs (an import) after
/// some of them became durable; this many at most (each a key's worth of text). The limits on
/// definitions keep refusals from happening at all.
const REFUSALS_KEPT_MAX: usize = 1024;

/// Requests waiting for their ops, and the refusals they may be told about.
#[derive(Debug, Default)]
pub(crate) struct CommitNotices {
    /// (first op after the request's start, last op of the request, its ticket), in order.
    waiting: Vec<(u64, u64, Ticket)>,
    refused: Vec<DefinitionNotStored>,
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

    /// [`Notice::Durable`] for `ticket` once every op emitted from `first` on (a request's, and
    /// those of earlier requests the caller started at `first`) is durable: `Err` if the catalog
    /// refused one of them. At once when there are none or persistence is off.
    pub fn notice_when_durable_since(&mut self, first: u64, ticket: Ticket) {
        if !self.persist.enabled {
            self.notices.push_back(Notice::Durable { ticket, result: Ok(()) });
            return;
        }
        self.flush_definitions();
        let last = self.persist.last_op_seq();
        let notices = &mut self.persist.commit_notices;
        if last < first {
            self.notices.push_back(Notice::Durable { ticket, result: Ok(()) });
        } else if last <= self.persist.durable_through {
            let result = notices.refusal_in(first, last).map_or(Ok(()), Err);
            self.notices.push_back(Notice::Durable { ticket, result });
        } else {
            notices.waiting.push((first, last, ticket));
        }
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

    /// Notices the requests whose ops are all durable now (from `handle_persisted`).
    pub(crate) fn notify_commits(&mut self) {
        let durable = self.persist.durable_through;
        let notices = &mut self.persist.commit_notices;
        let waiting = std::mem::take(&mut notices.waiting);
        for (first, last, ticket) in waiting {
            if last <= durable {
                let result = notices.refusal_in(first, last).map_or(Ok(()), Err);
                self.notices.push_back(Notice::Durable { ticket, result });
            } else {
                notices.waiting.push((first, last, ticket));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hourglass_wire::{QueueDeclare, ShortStr};

    use super::*;
    use crate::{BrokerConfig, Timestamp};

    /// The durability notices the broker has for the driver, by ticket.
    fn durable(broker: &mut Broker) -> Vec<(Ticket, Result<(), DefinitionNotStored>)> {
        std::iter::from_fn(|| broker.poll_notice())
            .map(|notice| match notice {
                Notice::Durable { ticket, result } => (ticket, result),
                other => panic!("not a durability notice: {other:?}"),
            })
            .collect()
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
        broker.notice_when_durable_since(broker.op_seq() + 1, 1);
        assert_eq!(durable(&mut broker), [(1, Ok(()))], "nothing written: at once");

        let first = broker.op_seq() + 1;
        declare(&mut broker, "kept");
        broker.notice_when_durable_since(first, 2);
        let kept_through = broker.persist.last_op_seq();
        let first = broker.op_seq() + 1;
        declare(&mut broker, "refused");
        broker.notice_when_durable_since(first, 3);
        let last = broker.persist.last_op_seq();
        assert_eq!(durable(&mut broker), [], "nothing durable yet");

        broker.handle_persisted(kept_through, Timestamp::ZERO);
        assert_eq!(durable(&mut broker), [(2, Ok(()))]);
        let refusal = DefinitionNotStored { op_seq: last, reason: "too large".into() };
        broker.handle_catalog_refused(refusal.clone());
        broker.handle_persisted(last, Timestamp::ZERO);
        assert_eq!(durable(&mut broker), [(3, Err(refusal))]);
        // An import that started before both declares learns of the refusal after the fact.
        broker.notice_when_durable_since(1, 4);
        assert!(durable(&mut broker)[0].1.is_err());
    }
}
