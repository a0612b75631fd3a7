//! The front ends' handle on the broker task: typed requests sent, their answers awaited.

use std::any::Any;

use hourglass_broker::admin::slices;
use hourglass_broker::admin::SqsGatewayError;
use hourglass_broker::requests::{
    Job, Listing, ListingKeys, ListingRows, NextOpSeq, Question, ReadWait, Request, SqsWait,
};
use hourglass_broker::{Broker, BrokerConfig, Ticket, Timestamp};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::jobs::{JobRequest, JobRunner, Later};

/// Sends typed requests to the task that owns the broker (`hourglass_broker::requests`); cheap
/// to clone.
#[derive(Clone)]
pub struct BrokerHandle {
    jobs: mpsc::Sender<JobRequest>,
    /// Whether [`BrokerHandle::request`] waits until a job's changes are durable (see [`Self::unsynced`]).
    synced: bool,
}

/// A [`BrokerHandle`] that does not keep the broker task alive (the task ends when the last
/// strong handle goes, at shutdown).
#[derive(Clone)]
pub struct WeakBrokerHandle {
    jobs: mpsc::WeakSender<JobRequest>,
}

impl WeakBrokerHandle {
    /// The handle, while the broker task still takes jobs.
    pub fn upgrade(&self) -> Option<BrokerHandle> {
        self.jobs.upgrade().map(BrokerHandle::new)
    }
}

impl BrokerHandle {
    pub fn new(jobs: mpsc::Sender<JobRequest>) -> Self {
        BrokerHandle { jobs, synced: true }
    }

    pub fn downgrade(&self) -> WeakBrokerHandle {
        WeakBrokerHandle { jobs: self.jobs.downgrade() }
    }

    /// The same broker, with jobs answered as soon as they ran: for a request made of many
    /// changes (a definitions import), which then waits once with [`Self::durable_since`]
    /// instead of once per change (a 2,000-queue import took 3.4 s of one fsync each).
    pub(crate) fn unsynced(&self) -> BrokerHandle {
        BrokerHandle { jobs: self.jobs.clone(), synced: false }
    }

    /// Asks `question` on the broker task, in order with AMQP commands, and answers as soon as
    /// it ran: nothing it did needs to be durable.
    pub async fn ask<Q: Question>(&self, question: Q) -> Result<Q::Answer, ApiError> {
        answer_of(self.send(Job::ask(question), None).await?)
    }

    /// Applies `request` on the broker task, in order with AMQP commands, and answers once
    /// everything it changed is durable (issue #22: a 2xx means durable). A definition change
    /// the catalog refused is a 500 naming it, whatever the request answered.
    pub async fn request<R: Request>(&self, request: R) -> Result<R::Answer, ApiError> {
        if !self.synced {
            return answer_of(self.send(Job::request(request), None).await?);
        }
        let (durable_tx, durable_rx) = oneshot::channel();
        let answer = self.send(Job::request_durably(request), Some(Later::Durable(durable_tx))).await?;
        durable_rx.await.map_err(|_| ApiError::Unavailable)??;
        answer_of(answer)
    }

    /// The op_seq the broker's next store op will get: what [`Self::durable_since`] takes.
    pub(crate) async fn next_op_seq(&self) -> Result<u64, ApiError> {
        self.ask(NextOpSeq).await
    }

    /// Waits until every op from `first` on that the broker has emitted so far is durable; a
    /// definition change among them the catalog refused is a 500.
    pub(crate) async fn durable_since(&self, first: u64) -> Result<(), ApiError> {
        let (durable_tx, durable_rx) = oneshot::channel();
        self.send(Job::when_durable_since(first), Some(Later::Durable(durable_tx))).await?;
        durable_rx.await.map_err(|_| ApiError::Unavailable)??;
        Ok(())
    }

    /// An SQS long poll starts waiting for a message in a queue: the ticket to take the wait
    /// back with (`SqsUnwait`), and what fires once the queue has a message (at once when it
    /// has one now).
    pub async fn wait_for_sqs_message(
        &self,
        wait: SqsWait,
    ) -> Result<Result<(Ticket, oneshot::Receiver<()>), SqsGatewayError>, ApiError> {
        let (woken_tx, woken_rx) = oneshot::channel();
        let answer = self.send(Job::wait_for_sqs_message(wait), Some(Later::Woken(woken_tx))).await?;
        let waiting: Result<Ticket, SqsGatewayError> = answer_of(answer)?;
        Ok(waiting.map(|ticket| (ticket, woken_rx)))
    }

    /// The HTTP API's get waits for the read its queue's next message is in
    /// ([`Gotten::awaits_read`](hourglass_broker::requests::Gotten)): what fires once it is
    /// answered (at once when none is awaited now).
    pub(crate) async fn wait_for_read(&self, wait: ReadWait) -> Result<oneshot::Receiver<()>, ApiError> {
        let (woken_tx, woken_rx) = oneshot::channel();
        self.send(Job::wait_for_read(wait), Some(Later::Woken(woken_tx))).await?;
        Ok(woken_rx)
    }

    /// A listing's rows, built on the broker task in slices with other work between them
    /// (`admin/slices.rs`, issue 22): one job takes the listing's keys, then each job builds
    /// the rows of at most `SLICE_ROWS_MAX` of them. The rows come in the keys' order, not the
    /// listing's: the caller sorts them, off the broker task.
    pub(crate) async fn rows_in_slices<L: Listing>(&self, listing: L) -> Result<Vec<L::Row>, ApiError> {
        let keys = self.ask(ListingKeys(listing)).await?;
        let mut all = Vec::with_capacity(keys.len());
        for slice in slices::slices(keys) {
            all.extend(self.rows_of::<L>(slice).await?);
        }
        Ok(all)
    }

    /// The rows of one slice of a listing's keys (`slices::slices`), in one job.
    pub(crate) async fn rows_of<L: Listing>(&self, slice: Vec<L::Key>) -> Result<Vec<L::Row>, ApiError> {
        self.ask(ListingRows::<L>::of(slice)).await
    }

    /// Sends `job` to the broker task and waits for its answer.
    async fn send(&self, job: Job, later: Option<Later>) -> Result<Box<dyn Any + Send>, ApiError> {
        let (answer, answered) = oneshot::channel();
        self.jobs.send(JobRequest { job, answer, later }).await.map_err(|_| ApiError::Unavailable)?;
        answered.await.map_err(|_| ApiError::Unavailable)
    }

    /// A broker of its own on a task that only runs jobs (effects are dropped): for tests of the
    /// API without the AMQP server.
    pub fn standalone() -> BrokerHandle {
        Self::standalone_with(Broker::new(BrokerConfig::default()))
    }

    /// [`Self::standalone`] with a broker the caller set up (stand-in AMQP connections, say).
    pub fn standalone_with(mut broker: Broker) -> BrokerHandle {
        let (tx, mut rx) = mpsc::channel::<JobRequest>(64);
        tokio::spawn(async move {
            let mut jobs = JobRunner::default();
            while let Some(job) = rx.recv().await {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                jobs.run(job, &mut broker, Timestamp::from_millis(now));
                while broker.poll_effect().is_some() {}
                jobs.hand_over_notices(&mut broker);
            }
        });
        BrokerHandle::new(tx)
    }
}

/// A job's answer as the type its request names. A job answers its own request's type, so the
/// `Internal` error only shows a bug.
fn answer_of<T: 'static>(answer: Box<dyn Any + Send>) -> Result<T, ApiError> {
    answer
        .downcast::<T>()
        .map(|answer| *answer)
        .map_err(|_| ApiError::Internal("a job answered another type".into()))
}

#[cfg(test)]
mod tests {
    use hourglass_broker::requests::{AsUser, DeclareQueue, QueueListing};
    use hourglass_broker::{DefinitionNotStored, Permissions, StoreOp};
    use hourglass_wire::{QueueDeclare, ShortStr};

    use super::*;

    /// A broker task whose "store" refuses every definition change and makes the rest durable.
    fn refusing_catalog() -> BrokerHandle {
        let (tx, mut rx) = mpsc::channel::<JobRequest>(8);
        let mut broker = Broker::new(BrokerConfig { persistence: true, ..BrokerConfig::default() });
        tokio::spawn(async move {
            let mut jobs = JobRunner::default();
            while let Some(job) = rx.recv().await {
                jobs.run(job, &mut broker, Timestamp::ZERO);
                while broker.poll_effect().is_some() {}
                let mut last = None;
                while let Some(op) = broker.poll_store_op() {
                    if let StoreOp::Catalog(_) = op.op {
                        broker.handle_catalog_refused(DefinitionNotStored {
                            op_seq: op.op_seq,
                            reason: "no".into(),
                        });
                    }
                    last = Some(op.op_seq);
                }
                if let Some(last) = last {
                    broker.handle_persisted(last, Timestamp::ZERO);
                }
                jobs.hand_over_notices(&mut broker);
            }
        });
        BrokerHandle::new(tx)
    }

    /// A durable declare whose catalog change is refused answers 500, not 2xx (issue #22,
    /// finding 3); a job that changes nothing durable still answers.
    #[tokio::test]
    async fn a_change_the_catalog_refuses_is_a_500() {
        let handle = refusing_catalog();
        let declare = QueueDeclare { queue: ShortStr::from_static("q"), durable: true, ..Default::default() };
        let who = AsUser { user: "guest".into(), vhost: "/".into(), permissions: Permissions::full() };
        let declared = handle.request(DeclareQueue { who, declare }).await;
        let error = declared.expect_err("a refused definition answered success");
        assert_eq!(error.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(error.reason().contains("could not be stored"), "{error}");
        let listed = handle.ask(ListingKeys(QueueListing { vhost: None })).await.map(|keys| keys.len());
        assert_eq!(listed.ok(), Some(1));
    }
}
