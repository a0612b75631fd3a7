//! Jobs to the broker task and their answers.

use hourglass_broker::admin::Job;
use hourglass_broker::{Broker, BrokerConfig, Timestamp};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;

/// Sends closures to the task that owns the broker; cheap to clone.
#[derive(Clone)]
pub struct BrokerHandle {
    jobs: mpsc::Sender<Job>,
}

impl BrokerHandle {
    pub fn new(jobs: mpsc::Sender<Job>) -> Self {
        BrokerHandle { jobs }
    }

    /// Runs `f` on the broker task, in order with AMQP commands, and returns its result.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Broker, Timestamp) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |broker, now| {
            let _ = tx.send(f(broker, now));
        });
        self.jobs.send(job).await.map_err(|_| ApiError::unavailable())?;
        rx.await.map_err(|_| ApiError::unavailable())
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
