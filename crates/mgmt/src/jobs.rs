//! Jobs on their way to the task that owns the broker, and that task's side of running them.
//!
//! A front end sends a [`JobRequest`]: a [`Job`] built from one typed request
//! (`hourglass_broker::requests`), the channel its answer comes back on, and, when it will wait
//! for more (a request's store ops durable, a long poll's message, the read a get waits for),
//! the channel that waits.
//! The broker task runs it with a [`JobRunner`], which gives each run a ticket, keeps who waits
//! on the tickets the broker holds, and hands them the broker's notices. The broker itself holds
//! tickets, never channels (ARCHITECTURE.md rule 3).

use std::any::Any;
use std::collections::HashMap;

use hourglass_broker::requests::Job;
use hourglass_broker::{Broker, DefinitionNotStored, Notice, Ticket, Timestamp};
use tokio::sync::oneshot;

/// A job, the way its answer goes back, and who waits on its ticket afterwards.
pub struct JobRequest {
    pub(crate) job: Job,
    pub(crate) answer: oneshot::Sender<Box<dyn Any + Send>>,
    pub(crate) later: Option<Later>,
}

/// Who waits on a job's ticket after its answer.
pub(crate) enum Later {
    /// Until its store ops are durable.
    Durable(oneshot::Sender<Result<(), DefinitionNotStored>>),
    /// A long poll, until its queue has a message; a get, until the read it waits for is
    /// answered.
    Woken(oneshot::Sender<()>),
}

/// The broker task's side of jobs: runs them, each under a ticket of its own, and hands the
/// broker's notices to whoever waits on their tickets.
#[derive(Default)]
pub struct JobRunner {
    last_ticket: Ticket,
    waiting: HashMap<Ticket, Later>,
}

impl JobRunner {
    /// Runs `request`'s job on `broker` and sends its answer back.
    pub fn run(&mut self, request: JobRequest, broker: &mut Broker, now: Timestamp) {
        self.last_ticket += 1;
        let ticket = self.last_ticket;
        let JobRequest { job, answer, later } = request;
        let ran = job.run(broker, now, ticket);
        if let Some(later) = later.filter(|_| ran.ticket_held) {
            self.waiting.insert(ticket, later);
        }
        // A sender that went away (its HTTP request dropped) no longer wants the answer.
        let _ = answer.send(ran.answer);
    }

    /// Hands each of the broker's notices to whoever waits on its ticket.
    pub fn hand_over_notices(&mut self, broker: &mut Broker) {
        while let Some(notice) = broker.poll_notice() {
            match notice {
                Notice::Durable { ticket, result } => {
                    if let Some(Later::Durable(waiting)) = self.waiting.remove(&ticket) {
                        let _ = waiting.send(result);
                    }
                }
                Notice::SqsReady { ticket } | Notice::ReadAnswered { ticket } => {
                    if let Some(Later::Woken(waiting)) = self.waiting.remove(&ticket) {
                        let _ = waiting.send(());
                    }
                }
                Notice::SqsWithdrawn { ticket } => {
                    self.waiting.remove(&ticket);
                }
            }
        }
    }

    /// Tickets someone still waits on.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use hourglass_broker::admin::SqsGatewayError;
    use hourglass_broker::requests::{AsUser, DeclareQueue, SqsUnwait, SqsWait};
    use hourglass_broker::{AmqpError, BrokerConfig, Permissions};
    use hourglass_wire::{QueueDeclare, ShortStr};

    use super::*;

    fn sent(job: Job, later: Option<Later>) -> (JobRequest, oneshot::Receiver<Box<dyn Any + Send>>) {
        let (answer, answered) = oneshot::channel();
        (JobRequest { job, answer, later }, answered)
    }

    /// A durable request's answer comes at once and its notice once its ops are durable; a long
    /// poll's ticket is kept until its wait is taken back. Nothing is kept that no one waits on.
    #[tokio::test]
    async fn a_ticket_is_kept_while_someone_waits_on_it() {
        let mut broker = Broker::new(BrokerConfig { persistence: true, ..BrokerConfig::default() });
        let mut runner = JobRunner::default();
        let who = AsUser { user: "guest".into(), vhost: "/".into(), permissions: Permissions::full() };
        let declare = QueueDeclare { queue: ShortStr::from_static("q"), durable: true, ..Default::default() };
        let (durable_tx, mut durable_rx) = oneshot::channel();
        let job = Job::request_durably(DeclareQueue { who, declare });
        let (request, answered) = sent(job, Some(Later::Durable(durable_tx)));
        runner.run(request, &mut broker, Timestamp::ZERO);
        runner.hand_over_notices(&mut broker);
        let answer = answered.await.unwrap().downcast::<Result<bool, AmqpError>>().unwrap();
        assert_eq!(*answer, Ok(true), "made the queue");
        assert!(durable_rx.try_recv().is_err(), "not durable before the store says so");
        assert_eq!(runner.waiting(), 1);
        let last = std::iter::from_fn(|| broker.poll_store_op()).last().unwrap().op_seq;
        broker.handle_persisted(last, Timestamp::ZERO);
        runner.hand_over_notices(&mut broker);
        assert_eq!(durable_rx.try_recv(), Ok(Ok(())));
        assert_eq!(runner.waiting(), 0);

        let (woken_tx, mut woken_rx) = oneshot::channel();
        let wait = SqsWait { vhost: "/".into(), queue: "q".into() };
        let (request, answered) = sent(Job::wait_for_sqs_message(wait), Some(Later::Woken(woken_tx)));
        runner.run(request, &mut broker, Timestamp::ZERO);
        let waiting = answered.await.unwrap().downcast::<Result<Ticket, SqsGatewayError>>().unwrap();
        let ticket = waiting.unwrap();
        runner.hand_over_notices(&mut broker);
        assert_eq!(runner.waiting(), 1, "the empty queue's poll waits");
        let (request, _) = sent(Job::request(SqsUnwait { ticket }), None);
        runner.run(request, &mut broker, Timestamp::ZERO);
        runner.hand_over_notices(&mut broker);
        assert_eq!(runner.waiting(), 0, "taken back");
        assert!(woken_rx.try_recv().is_err(), "and never woken");
    }
}
