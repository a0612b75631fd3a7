//! The typed door into the broker for the front ends that are not AMQP sessions: the HTTP API,
//! and the SQS endpoint (issue 41).
//!
//! AMQP connections drive the broker with [`Command`](crate::Command)s. Everything else asks
//! it one of the request types defined in this module's files, each with its own answer type:
//! - a [`Question`] only reads, and is answered as soon as it ran;
//! - a [`Request`] may change the broker; its sender decides whether to wait until what it
//!   changed is durable ([`Job::request_durably`]);
//! - a [`Listing`] is read in slices ([`ListingKeys`], then [`ListingRows`] per slice), so a
//!   listing of 100,000 queues never holds the broker task for long (`admin/slices.rs`).
//!
//! The traits are sealed: only this crate defines requests, so every way a front end can
//! change the broker is listed here, and none hands the broker a closure. A front end sends a
//! [`Job`] built from a request to the task that owns the broker, which runs it between
//! commands ([`Job::run`]) and hands its answer back. What comes later (a request's store ops
//! durable, a long poll's message) comes as a [`Notice`](crate::Notice) for the ticket the
//! driver ran it under.

mod admin_channel;
mod delayed;
mod listings;
mod node;
mod sqs;
mod topology;

pub use admin_channel::{
    AdminError, AsUser, CallMethod, CheckAlive, DeclareExchange, DeclareQueue, DeleteExchange, DeleteQueue,
    GetMessages, GetSettlement, Gotten, PublishMessage, ReadWait,
};
pub use delayed::{
    CancelDelayed, CancelDelayedKeys, ChangeVisibility, ConnectionEnds, DelayedWithMessageId, DueAt,
    InFlight, InFlightWithPeers, PeekDelayed, RescheduleDelayed, RescheduleDelayedKeys,
};
pub use listings::{
    BindingListing, BindingsFrom, ChannelListing, ConnectionListing, ConsumerListing, ExchangeListing,
    KeyedRows, Listing, ListingKeys, ListingRows, QueueListing, QueueStatsListing,
};
pub use node::{
    BindingCounts, CloseConnections, ConnectionCount, NextOpSeq, NodeTotals, StoreIdentity, Totals,
};
pub use sqs::{
    ChangeSqsArguments, ChangeVisibilityBatch, DeclareSqsQueue, MoveMessages, PurgeSqsQueue,
    QueuesWithArgument, SqsDeadLetterSources, SqsDeclared, SqsDeleteBatch, SqsOutgoing, SqsReceipt,
    SqsReceive, SqsSendBatch, SqsUnwait, SqsWait,
};
pub use topology::{
    AddVhost, BindingsTo, ClearPolicy, DeclaredBindings, DeleteVhost, ExchangeKeys, ListPolicies,
    QueueArguments, QueueDetailsNamed, QueueNameGroups, ReadyCount, SetPermissions, SetPolicy,
    SetVhostMaxQueues, TracedVhosts, Tracing, VhostNames, WouldExceedQueueLimit,
};

use std::any::Any;

use crate::broker::Broker;
use crate::notices::Ticket;
use crate::time::Timestamp;

mod sealed {
    /// Only this crate's request types implement the door's traits.
    pub trait Sealed {}
}

/// A request that only reads the broker: answered as soon as it ran.
pub trait Question: sealed::Sealed + Send + 'static {
    type Answer: Send + 'static;
    fn answer(self, broker: &Broker, now: Timestamp) -> Self::Answer;
}

/// A request that may change the broker.
pub trait Request: sealed::Sealed + Send + 'static {
    type Answer: Send + 'static;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer;
}

/// Work for the task that owns the broker, built from one request: the driver runs it between
/// commands ([`Job::run`]) and hands the answer back to its sender. It holds no closure: only
/// the request, which is data.
pub struct Job(Box<dyn Run>);

/// What a job did: the answer (of the type its request names, which the sender takes back with
/// `downcast`), and whether the broker holds the run's ticket for a [`Notice`](crate::Notice)
/// to come.
pub struct Ran {
    pub answer: Box<dyn Any + Send>,
    pub ticket_held: bool,
}

impl Job {
    /// Answers `question`.
    pub fn ask<Q: Question>(question: Q) -> Job {
        Job(Box::new(Asked(question)))
    }

    /// Applies `request`.
    pub fn request<R: Request>(request: R) -> Job {
        Job(Box::new(Applied { request, durably: false }))
    }

    /// Applies `request`, then [`Notice::Durable`](crate::Notice::Durable) comes for the run's
    /// ticket once every store op it emitted is durable (at once when it emitted none).
    pub fn request_durably<R: Request>(request: R) -> Job {
        Job(Box::new(Applied { request, durably: true }))
    }

    /// [`Notice::Durable`](crate::Notice::Durable) for the run's ticket once every store op the
    /// broker emitted from `first` on (see [`NextOpSeq`]) is durable: for a sender that made many
    /// requests without waiting for each (a definitions import).
    pub fn when_durable_since(first: u64) -> Job {
        Job(Box::new(DurableSince(first)))
    }

    /// An SQS long poll waits for a message: [`Notice::SqsReady`](crate::Notice::SqsReady) comes
    /// for the run's ticket once the queue has one (`Broker::sqs_wait`). Answers
    /// `Result<Ticket, SqsGatewayError>`: take the wait back with [`SqsUnwait`] and that ticket.
    pub fn wait_for_sqs_message(wait: SqsWait) -> Job {
        Job(Box::new(wait))
    }

    /// The HTTP API's get waits for the read it found its next message in
    /// ([`Gotten::awaits_read`]): [`Notice::ReadAnswered`](crate::Notice::ReadAnswered) comes for
    /// the run's ticket once it is answered (at once when none is awaited now). Answers `()`.
    pub fn wait_for_read(wait: ReadWait) -> Job {
        Job(Box::new(wait))
    }

    /// Runs the job (the driver's side), under `ticket`: the driver's name for whatever notice
    /// the job asks for, unique among those still waiting.
    pub fn run(self, broker: &mut Broker, now: Timestamp, ticket: Ticket) -> Ran {
        self.0.run(broker, now, ticket)
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

/// A request the broker task can run without knowing its type.
trait Run: Send {
    fn run(self: Box<Self>, broker: &mut Broker, now: Timestamp, ticket: Ticket) -> Ran;
}

struct Asked<Q>(Q);

impl<Q: Question> Run for Asked<Q> {
    fn run(self: Box<Self>, broker: &mut Broker, now: Timestamp, _: Ticket) -> Ran {
        Ran { answer: Box::new(self.0.answer(broker, now)), ticket_held: false }
    }
}

struct Applied<R> {
    request: R,
    durably: bool,
}

impl<R: Request> Run for Applied<R> {
    fn run(self: Box<Self>, broker: &mut Broker, now: Timestamp, ticket: Ticket) -> Ran {
        let first = broker.op_seq() + 1;
        let answer = Box::new(self.request.apply(broker, now));
        if self.durably {
            broker.notice_when_durable_since(first, ticket);
        }
        Ran { answer, ticket_held: self.durably }
    }
}

struct DurableSince(u64);

impl Run for DurableSince {
    fn run(self: Box<Self>, broker: &mut Broker, _: Timestamp, ticket: Ticket) -> Ran {
        broker.notice_when_durable_since(self.0, ticket);
        Ran { answer: Box::new(()), ticket_held: true }
    }
}

impl Run for ReadWait {
    fn run(self: Box<Self>, broker: &mut Broker, _: Timestamp, ticket: Ticket) -> Ran {
        broker.wait_for_read(&self.vhost, &self.queue, ticket);
        Ran { answer: Box::new(()), ticket_held: true }
    }
}

impl Run for SqsWait {
    fn run(self: Box<Self>, broker: &mut Broker, _: Timestamp, ticket: Ticket) -> Ran {
        let waiting = broker.sqs_wait(&self.vhost, &self.queue, ticket).map(|()| ticket);
        Ran { ticket_held: waiting.is_ok(), answer: Box::new(waiting) }
    }
}
