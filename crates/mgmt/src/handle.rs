//! Jobs to the broker task and their answers.

use hourglass_broker::admin::slices::{self, SliceKey};
use hourglass_broker::admin::Job;
use hourglass_broker::{Broker, BrokerConfig, Timestamp};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;

/// Sends closures to the task that owns the broker; cheap to clone.
#[derive(Clone)]
pub struct BrokerHandle {
    jobs: mpsc::Sender<Job>,
    /// Whether [`BrokerHandle::run`] waits until a job's changes are durable (see [`Self::unsynced`]).
    synced: bool,
}

/// A [`BrokerHandle`] that does not keep the broker task alive (the task ends when the last
/// strong handle goes, at shutdown).
#[derive(Clone)]
pub struct WeakBrokerHandle {
    jobs: mpsc::WeakSender<Job>,
}

impl WeakBrokerHandle {
    /// The handle, while the broker task still takes jobs.
    pub fn upgrade(&self) -> Option<BrokerHandle> {
        self.jobs.upgrade().map(BrokerHandle::new)
    }
}

impl BrokerHandle {
    pub fn new(jobs: mpsc::Sender<Job>) -> Self {
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

    /// Runs `f` on the broker task, in order with AMQP commands, and returns its result once
    /// everything `f` changed is durable (issue #22: a 2xx means durable). A definition change
    /// the catalog refused is a 500 naming it, whatever `f` returned.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Broker, Timestamp) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        if !self.synced {
            return self.run_now(f).await;
        }
        let (durable_tx, durable_rx) = oneshot::channel();
        let value = self
            .run_now(move |broker, now| {
                let first = broker.op_seq() + 1;
                let notice = Box::new(move |committed| {
                    let _ = durable_tx.send(committed);
                });
                broker.with_commit_notice_since(first, |broker| f(broker, now), notice)
            })
            .await?;
        durable_rx.await.map_err(|_| ApiError::Unavailable)??;
        Ok(value)
    }

    /// The op_seq the broker's next store op will get: what [`Self::durable_since`] takes.
    pub(crate) async fn next_op_seq(&self) -> Result<u64, ApiError> {
        self.run_now(|broker, _| broker.op_seq() + 1).await
    }

    /// Waits until every op from `first` on that the broker has emitted so far is durable; a
    /// definition change among them the catalog refused is a 500.
    pub(crate) async fn durable_since(&self, first: u64) -> Result<(), ApiError> {
        let (durable_tx, durable_rx) = oneshot::channel();
        self.run_now(move |broker, _| {
            let notice = Box::new(move |committed| {
                let _ = durable_tx.send(committed);
            });
            broker.with_commit_notice_since(first, |_| (), notice);
        })
        .await?;
        durable_rx.await.map_err(|_| ApiError::Unavailable)??;
        Ok(())
    }

    /// A listing's rows, built on the broker task in slices with other work between them
    /// (`admin/slices.rs`, issue 22): one job takes the listing's `keys`, then each job builds
    /// `rows` for at most `SLICE_ROWS_MAX` of them. The rows come in the keys' order, not the
    /// listing's: the caller sorts them, off the broker task.
    pub(crate) async fn rows_in_slices<K, R>(
        &self,
        keys: impl FnOnce(&Broker) -> Vec<K> + Send + 'static,
        rows: fn(&Broker, &[K]) -> Vec<R>,
    ) -> Result<Vec<R>, ApiError>
    where
        K: SliceKey + Send + 'static,
        R: Send + 'static,
    {
        let keys = self.read(keys).await?;
        let mut all = Vec::with_capacity(keys.len());
        for slice in slices::slices(keys) {
            all.extend(self.rows_of(slice, rows).await?);
        }
        Ok(all)
    }

    /// The rows of one slice of a listing's keys (`slices::slices`), in one job.
    pub(crate) async fn rows_of<K, R>(
        &self,
        slice: Vec<K>,
        rows: fn(&Broker, &[K]) -> Vec<R>,
    ) -> Result<Vec<R>, ApiError>
    where
        K: Send + 'static,
        R: Send + 'static,
    {
        self.read(move |broker| rows(broker, &slice)).await
    }

    /// Runs `f`, which only reads, and answers as soon as it ran: nothing it did needs to be
    /// durable.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Broker) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        self.run_now(move |broker, _| f(broker)).await
    }

    /// Runs `f` and answers as soon as it ran.
    async fn run_now<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Broker, Timestamp) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |broker, now| {
            let _ = tx.send(f(broker, now));
        });
        self.jobs.send(job).await.map_err(|_| ApiError::Unavailable)?;
        rx.await.map_err(|_| ApiError::Unavailable)
    }

    /// A broker of its own on a task that only runs jobs (effects are dropped): for tests of the
    /// API without the AMQP server.
    pub fn standalone() -> BrokerHandle {
        let (tx, mut rx) = mpsc::channel::<Job>(64);
        let mut broker = Broker::new(BrokerConfig::default());
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                job(&mut broker, Timestamp::from_millis(now));
                while broker.poll_effect().is_some() {}
            }
        });
        BrokerHandle::new(tx)
    }
}

#[cfg(test)]
mod tests {
    use hourglass_broker::{DefinitionNotStored, StoreOp};
    use hourglass_wire::{QueueDeclare, ShortStr};

    use super::*;

    /// A broker task whose "store" refuses every definition change and makes the rest durable.
    fn refusing_catalog() -> BrokerHandle {
        let (tx, mut rx) = mpsc::channel::<Job>(8);
        let mut broker = Broker::new(BrokerConfig { persistence: true, ..BrokerConfig::default() });
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                job(&mut broker, Timestamp::ZERO);
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
        let declared = handle
            .run(move |b, now| b.with_admin_channel("guest", "/", now, |ch| ch.call(declare)).map(|_| ()))
            .await;
        let error = declared.expect_err("a refused definition answered success");
        assert_eq!(error.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(error.reason().contains("could not be stored"), "{error}");
        let listed = handle.run(|b, _| b.list_queue_details().len()).await;
        assert_eq!(listed.ok(), Some(1));
    }
}
