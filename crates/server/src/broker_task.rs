//! The broker task: owns the `Broker`, applies commands in arrival order, fires its timers, and
//! forwards effects to the connection tasks (ADR 0001).

use std::collections::HashMap;

use hourglass_broker::{
    Broker, Command, ConnectionId, DefinitionNotStored, Effect, SequencedOp, StoredLocation,
};
use tokio::sync::mpsc;

use crate::clock::Clock;

/// How many commands (and other inputs) the task applies before it flushes effects: large enough
/// to amortise wake-ups under load, small enough to keep latency low.
const MAX_APPLIED_PER_FLUSH: usize = 256;

/// Commands a connection task hands over in one input at most (what one read of its socket
/// yields, in batches): one hand-off per batch instead of per command.
pub const MAX_COMMANDS_PER_INPUT: usize = 64;

/// Inputs are bounded so a flood of publishes slows publishers down (their connection tasks wait
/// on `send`) instead of growing memory without limit: at most this many inputs, so at most
/// 16,384 commands, wait.
pub const INPUT_QUEUE_CAPACITY: usize = 256;

/// Effects for one connection, in order.
pub type Mailbox = mpsc::UnboundedSender<Vec<Effect>>;

// Sized by `Command` (see its note): boxing would allocate per published message.
#[allow(clippy::large_enum_variant)]
pub enum BrokerInput {
    /// A new connection's mailbox; sent before any of its commands.
    Register { conn: ConnectionId, mailbox: Mailbox },
    /// A connection's commands, in order (at most [`MAX_COMMANDS_PER_INPUT`]).
    Commands(Vec<Command>),
    /// Work from the management API, run in order with commands; its effects are flushed like
    /// a command's (a queue deleted over HTTP cancels its consumers).
    Job(hourglass_broker::admin::Job),
    /// From the store thread: every store op up to `op_seq` is durable, and where the enqueue
    /// records it wrote lie (so queues over their paging limits can drop bodies, ADR 0007).
    Persisted {
        op_seq: u64,
        stored: Vec<StoredLocation>,
        /// Definition changes among them the catalog refused (so the API answers 500).
        refused: Vec<DefinitionNotStored>,
    },
}

/// Where the broker's store ops go: the store thread (`persistence.rs`), in op_seq order.
pub type StoreSender = std::sync::mpsc::Sender<Vec<SequencedOp>>;

pub async fn run(
    mut broker: Broker,
    mut inputs: mpsc::Receiver<BrokerInput>,
    clock: Clock,
    store: Option<StoreSender>,
) {
    let mut mailboxes: HashMap<ConnectionId, Mailbox> = HashMap::new();
    let mut outbox: HashMap<ConnectionId, Vec<Effect>> = HashMap::new();
    loop {
        // Ops first (restore may have left some), so the store starts syncing them before the
        // effects are handed out.
        let ops: Vec<SequencedOp> = std::iter::from_fn(|| broker.poll_store_op()).collect();
        if !ops.is_empty() {
            match &store {
                Some(store) => {
                    if store.send(ops).is_err() {
                        tracing::error!("store thread gone; stopping the broker");
                        break;
                    }
                }
                None => {
                    if let Some(last) = ops.last() {
                        broker.handle_persisted(last.op_seq, clock.now());
                    }
                }
            }
        }
        while let Some(effect) = broker.poll_effect() {
            outbox.entry(effect.conn()).or_default().push(effect);
        }
        for (conn, effects) in outbox.drain() {
            if let Some(mailbox) = mailboxes.get(&conn) {
                // A closed mailbox means the connection task has ended; its
                // ConnectionClosed command is on its way.
                let _ = mailbox.send(effects);
            }
        }
        let deadline = broker.next_deadline().map(|d| clock.instant_of(d));
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else { break };
                let mut applied = apply(&mut broker, &mut mailboxes, input, &clock);
                while applied < MAX_APPLIED_PER_FLUSH {
                    match inputs.try_recv() {
                        Ok(input) => applied += apply(&mut broker, &mut mailboxes, input, &clock),
                        Err(_) => break,
                    }
                }
            }
            _ = sleep_until(deadline) => broker.handle_timeout(clock.now()),
        }
    }
}

/// Applies one input; returns how many it counts for (its commands, else 1).
fn apply(
    broker: &mut Broker,
    mailboxes: &mut HashMap<ConnectionId, Mailbox>,
    input: BrokerInput,
    clock: &Clock,
) -> usize {
    match input {
        BrokerInput::Register { conn, mailbox } => {
            mailboxes.insert(conn, mailbox);
        }
        BrokerInput::Commands(commands) => {
            let applied = commands.len();
            // One reading of the clock per batch: a batch is one socket read's worth.
            let now = clock.now();
            for command in commands {
                if let Command::ConnectionClosed { conn } = &command {
                    mailboxes.remove(conn);
                }
                broker.handle_command(command, now);
            }
            return applied.max(1);
        }
        BrokerInput::Job(job) => job(broker, clock.now()),
        BrokerInput::Persisted { op_seq, stored, refused } => {
            for refusal in refused {
                broker.handle_catalog_refused(refusal);
            }
            broker.handle_stored(op_seq, &stored);
            broker.handle_persisted(op_seq, clock.now());
        }
    }
    1
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
