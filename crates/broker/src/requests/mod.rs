//! The typed door into the broker for the front ends that are not AMQP sessions: the HTTP API,
//! the SQS endpoint and the server's own start-up work (issue 41).
//!
//! AMQP connections drive the broker with [`Command`](crate::Command)s. Everything else asks
//! it one of the request types defined in this module's files, each with its own answer type:
//! - a [`Question`] only reads, and is answered as soon as it ran;
//! - a [`Request`] may change the broker; its sender decides whether to wait until what it
//!   changed is durable ([`Job::request_durably`]).
//! - a [`Listing`] is read in slices ([`ListingKeys`], then [`ListingRows`] per slice), so a
//!   listing of 100,000 queues never holds the broker task for long (`admin/slices.rs`).
//!
//! The traits are sealed: only this crate defines requests, so every way a front end can
//! change the broker is listed here, and none hands the broker a closure over itself. A front
//! end sends a [`Job`] built from a request to the task that owns the broker, which runs it
//! between commands ([`Job::run`]); the job hands the answer to the reply the sender gave (a
//! channel's sending half).

mod admin_channel;
mod delayed;
mod listings;
mod node;
mod sqs;
mod topology;

pub use admin_channel::{
    AsUser, CallMethod, CheckAlive, DeclareExchange, DeclareQueue, DeleteExchange, DeleteQueue, GetMessages,
    GetSettlement, Missing, PublishMessage,
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
    QueuesWithArgument, SqsDeadLetterSources, SqsDeclared, SqsDeleteBatch, SqsOutgoing, SqsReceive,
    SqsSendBatch, SqsUnwait, SqsWait,
};
pub use topology::{
    AddVhost, BindingsTo, ClearPolicy, DeclaredBindings, DeleteVhost, ExchangeKeys, ListPolicies,
    QueueDetailsNamed, QueueNames, ReadyCount, SetPermissions, SetPolicy, SetVhostMaxQueues, TracedVhosts,
    Tracing, VhostNames, WouldExceedQueueLimit,
};

use crate::broker::Broker;
use crate::persist::CommitNotice;
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

/// Work for the task that owns the broker, built from one request and the reply its sender
/// waits on; runs with exclusive access to the broker, between commands.
pub struct Job(Work);

/// What a [`Job`] runs.
type Work = Box<dyn FnOnce(&mut Broker, Timestamp) + Send>;

impl Job {
    /// Answers `question`, handing the answer to `reply`.
    pub fn ask<Q: Question>(question: Q, reply: impl FnOnce(Q::Answer) + Send + 'static) -> Job {
        Job(Box::new(move |broker, now| reply(question.answer(broker, now))))
    }

    /// Applies `request` and hands its answer to `reply` at once.
    pub fn request<R: Request>(request: R, reply: impl FnOnce(R::Answer) + Send + 'static) -> Job {
        Job(Box::new(move |broker, now| reply(request.apply(broker, now))))
    }

    /// Applies `request`, hands its answer to `reply` at once, and tells `durable` when every
    /// store op it emitted is durable (at once when it emitted none): `Err` when the catalog
    /// refused a definition change among them.
    pub fn request_durably<R: Request>(
        request: R,
        reply: impl FnOnce(R::Answer) + Send + 'static,
        durable: CommitNotice,
    ) -> Job {
        Job(Box::new(move |broker, now| {
            let first = broker.op_seq() + 1;
            let answer = broker.with_commit_notice_since(first, |broker| request.apply(broker, now), durable);
            reply(answer);
        }))
    }

    /// Tells `durable` when every store op the broker emitted from `first` on (see
    /// [`NextOpSeq`]) is durable: for a sender that made many requests without waiting for
    /// each (a definitions import).
    pub fn when_durable_since(first: u64, durable: CommitNotice) -> Job {
        Job(Box::new(move |broker, _| broker.with_commit_notice_since(first, |_| (), durable)))
    }

    /// Runs the job: the broker task's side.
    pub fn run(self, broker: &mut Broker, now: Timestamp) {
        (self.0)(broker, now)
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}
