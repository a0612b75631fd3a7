//! What the broker tells the front ends that wait on it later, by the ticket their driver gave
//! the request: a request's store ops are durable, a long poll's queue has a message, or the
//! read an HTTP API get waits for is answered. The driver polls them ([`Broker::poll_notice`])
//! as it polls effects, and hands each to whoever holds its ticket. The broker keeps tickets,
//! never the waiters themselves (ARCHITECTURE.md rule 3: it does not call back into its driver).

use crate::broker::Broker;
use crate::persist::DefinitionNotStored;

/// A driver's name for one waiting request.
pub type Ticket = u64;

/// One thing a waiting request is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Every store op of the request is durable; `Err` when the catalog refused a definition
    /// change among them (`persist/commits.rs`).
    Durable { ticket: Ticket, result: Result<(), DefinitionNotStored> },
    /// The long poll's queue has a message to receive, or is gone (`admin/sqs_gateway.rs`).
    SqsReady { ticket: Ticket },
    /// The long poll was taken back before a message came: nothing more comes for it.
    SqsWithdrawn { ticket: Ticket },
    /// The read the HTTP API's get waited for is answered, or its queue is gone
    /// (`waiting_gets.rs`): the get can go on.
    ReadAnswered { ticket: Ticket },
}

impl Broker {
    /// The next notice for the driver to hand over.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }
}
