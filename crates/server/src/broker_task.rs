//! The broker task: owns the `Broker`, applies commands in arrival order, fires its timers, and
//! forwards effects to the connection tasks (ADR 0001).

use rustc_hash::FxHashMap;
use std::sync::Arc;

use hourglass_broker::queue::{MessageRead, SpillFiles, SpillRead};
use hourglass_broker::{
    Broker, Command, ConnectionId, DefinitionNotStored, Effect, Message, MessageSource, SequencedOp,
    StoredLocation,
};
use hourglass_mgmt::JobRunner;
use tokio::sync::{mpsc, Semaphore};

use crate::blocking_reads::BlockingReads;
use crate::clock::Clock;
use crate::supervise::panic_message;

/// How many commands (and other inputs) the task applies before it flushes effects: large enough
/// to amortise wake-ups under load, small enough to keep latency low.
const MAX_APPLIED_PER_FLUSH: usize = 256;

/// Commands that may wait for the broker task at once, all connections together: a connection
/// whose commands do not fit waits (and is not read meanwhile), so a flood of publishes slows
/// its publishers down instead of growing memory without limit. One socket read yields a few
/// thousand commands at most, so a read's batch always fits.
pub const MAX_WAITING_COMMANDS: usize = 16_384;

/// Inputs other than commands (registrations, API jobs, the store's reports) that may wait: their
/// senders are bounded themselves; this keeps the queue bounded too.
const INPUT_QUEUE_CAPACITY: usize = 1024;

/// Effects for one connection, in order.
pub type Mailbox = mpsc::UnboundedSender<Vec<Effect>>;

/// A registered connection's mailbox, and how many effects it was last handed at once.
struct Recipient {
    mailbox: Mailbox,
    /// The size of the last batch (at most [`BATCH_HINT_MAX`]): the next batch's vector starts
    /// at it, so a steady flow of deliveries allocates each batch once instead of growing it
    /// by doubling, a copy at every step.
    last_batch: usize,
}

/// The most effects a batch's vector is made room for ahead (256 KiB of 64-byte effects).
const BATCH_HINT_MAX: usize = 4096;

/// Hands every effect the broker has to its connection's mailbox, a batch per connection.
fn hand_out_effects(
    broker: &mut Broker,
    recipients: &mut FxHashMap<ConnectionId, Recipient>,
    outbox: &mut FxHashMap<ConnectionId, Vec<Effect>>,
) {
    while let Some(effect) = broker.poll_effect() {
        let conn = effect.conn();
        let batch = outbox.entry(conn).or_insert_with(|| {
            Vec::with_capacity(recipients.get(&conn).map_or(0, |recipient| recipient.last_batch))
        });
        batch.push(effect);
    }
    for (conn, effects) in outbox.drain() {
        if let Some(recipient) = recipients.get_mut(&conn) {
            recipient.last_batch = effects.len().min(BATCH_HINT_MAX);
            // A closed mailbox means the connection task has ended; its
            // ConnectionClosed command is on its way.
            let _ = recipient.mailbox.send(effects);
        }
    }
}

pub enum BrokerInput {
    /// A new connection's mailbox; sent before any of its commands.
    Register { conn: ConnectionId, mailbox: Mailbox },
    /// A connection's commands, in order (one socket read's worth), holding `budget` of the
    /// [`MAX_WAITING_COMMANDS`] until they are applied.
    Commands { commands: Vec<Command>, budget: u32 },
    /// Work from the management API, run in order with commands; its effects are flushed like
    /// a command's (a queue deleted over HTTP cancels its consumers).
    Job(hourglass_mgmt::JobRequest),
    /// From the store thread: every store op up to `op_seq` is durable, and where the enqueue
    /// records it wrote lie (so queues over their paging limits can drop bodies, ADR 0007).
    Persisted {
        op_seq: u64,
        stored: Vec<StoredLocation>,
        /// Definition changes among them the catalog refused (so the API answers 500).
        refused: Vec<DefinitionNotStored>,
    },
}

/// The broker task's input queue, and the budget of [`MAX_WAITING_COMMANDS`] that commands take
/// from until they are applied.
pub fn input_queue() -> (mpsc::Sender<BrokerInput>, CommandBudget, mpsc::Receiver<BrokerInput>) {
    let (sender, receiver) = mpsc::channel(INPUT_QUEUE_CAPACITY);
    (sender, CommandBudget(Arc::new(Semaphore::new(MAX_WAITING_COMMANDS))), receiver)
}

/// The commands that may still wait for the broker task (shared by every connection task and
/// the broker task, which gives back what it applied).
#[derive(Clone, Debug)]
pub struct CommandBudget(Arc<Semaphore>);

/// The broker task has ended: the server is stopping.
#[derive(Debug)]
pub struct BrokerGone;

impl CommandBudget {
    /// Hands a connection's `commands` to the broker task as one input, in order, once the budget
    /// has room for them.
    pub async fn send(
        &self,
        inputs: &mpsc::Sender<BrokerInput>,
        commands: Vec<Command>,
    ) -> Result<(), BrokerGone> {
        if commands.is_empty() {
            return Ok(());
        }
        // Capped so that an (impossible) batch larger than the whole budget still goes, alone.
        let budget = u32::try_from(commands.len().min(MAX_WAITING_COMMANDS)).unwrap_or(u32::MAX);
        self.0.acquire_many(budget).await.map_err(|_| BrokerGone)?.forget();
        inputs.send(BrokerInput::Commands { commands, budget }).await.map_err(|_| BrokerGone)
    }

    /// Commands were applied: others may wait in their place.
    fn give_back(&self, budget: u32) {
        self.0.add_permits(budget as usize);
    }
}

/// Where the broker's store ops go: the store thread (`persistence.rs`), in op_seq order.
pub type StoreSender = std::sync::mpsc::Sender<Vec<SequencedOp>>;

/// Spill reads performed at once (each up to 80 KB).
const SPILL_READS_AT_ONCE: usize = 16;

/// Reads of paged messages performed at once (each a consumer read, at most a queue's resident
/// byte limit; a dead-lettering batch; or an HTTP API get's, at most its 16 MiB).
const MESSAGE_READS_AT_ONCE: usize = 8;

/// A far tier's spill read, performed through `files` (`hourglass_broker`'s `spill_reads.rs`).
fn read_spill(
    files: Option<Arc<dyn SpillFiles>>,
) -> impl Fn(&SpillRead) -> SpillChunk + Clone + Send + 'static {
    move |read| match &files {
        Some(files) => files.read_at(&read.file, read.offset, read.len),
        None => Err("no spill files".to_owned()),
    }
}

type SpillChunk = Result<Vec<u8>, String>;

/// A queue's read of paged messages, performed through `source` (`message_reads.rs`): records
/// in a row read at once. If that panics, each record is read alone, so one whose read or
/// decoding panics fails alone (it is dropped as unreadable), not its batch.
fn read_messages(
    source: Option<Arc<dyn MessageSource>>,
) -> impl Fn(&MessageRead) -> MessagesRead + Clone + Send + 'static {
    move |read| {
        let together = std::panic::AssertUnwindSafe(|| read.perform(source.as_deref()));
        std::panic::catch_unwind(together).unwrap_or_else(|panic| {
            tracing::warn!(
                queue = read.queue,
                "a read of paged messages {}; reading them one by one",
                panic_message(&*panic)
            );
            read.perform_each(|at| {
                let alone = std::panic::AssertUnwindSafe(|| MessageRead::read_one(source.as_deref(), at));
                std::panic::catch_unwind(alone)
                    .unwrap_or_else(|panic| Err(format!("the message read {}", panic_message(&*panic))))
            })
        })
    }
}

type MessagesRead = Vec<Result<Message, String>>;

pub async fn run(
    mut broker: Broker,
    mut inputs: mpsc::Receiver<BrokerInput>,
    budget: CommandBudget,
    clock: Clock,
    store: Option<StoreSender>,
) {
    // FxHash: connection ids are the broker's own, so no client can pile them into one bucket
    // (docs/dependencies.md, "Hashing").
    let mut mailboxes: FxHashMap<ConnectionId, Recipient> = FxHashMap::default();
    let mut outbox: FxHashMap<ConnectionId, Vec<Effect>> = FxHashMap::default();
    let mut jobs = JobRunner::default();
    let mut spill = BlockingReads::new(SPILL_READS_AT_ONCE);
    let mut paged = BlockingReads::new(MESSAGE_READS_AT_ONCE);
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
        spill.queue(std::iter::from_fn(|| broker.poll_spill_read()));
        spill.start(|| read_spill(broker.spill_files()), |_, panic| Err(format!("the spill read {panic}")));
        paged.queue(std::iter::from_fn(|| broker.poll_message_read()));
        paged.start(
            || read_messages(broker.message_source()),
            |read: &MessageRead, panic| {
                read.locations.iter().map(|_| Err(format!("the message read {panic}"))).collect()
            },
        );
        hand_out_effects(&mut broker, &mut mailboxes, &mut outbox);
        jobs.hand_over_notices(&mut broker);
        let deadline = broker.next_deadline().map(|d| clock.instant_of(d));
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else { break };
                let mut applied = apply(&mut broker, &mut mailboxes, &mut jobs, input, &budget, &clock);
                while applied < MAX_APPLIED_PER_FLUSH {
                    match inputs.try_recv() {
                        Ok(input) => applied += apply(&mut broker, &mut mailboxes, &mut jobs, input, &budget, &clock),
                        Err(_) => break,
                    }
                }
            }
            Some((read, chunk)) = spill.outcome() => broker.handle_spill_read(read, chunk, clock.now()),
            Some((read, messages)) = paged.outcome() => broker.handle_message_read(read, messages, clock.now()),
            _ = sleep_until(deadline) => broker.handle_timeout(clock.now()),
        }
    }
}

/// Applies one input; returns how many it counts for (its commands, else 1).
fn apply(
    broker: &mut Broker,
    mailboxes: &mut FxHashMap<ConnectionId, Recipient>,
    jobs: &mut JobRunner,
    input: BrokerInput,
    budget: &CommandBudget,
    clock: &Clock,
) -> usize {
    match input {
        BrokerInput::Register { conn, mailbox } => {
            mailboxes.insert(conn, Recipient { mailbox, last_batch: 0 });
        }
        BrokerInput::Commands { commands, budget: taken } => {
            let applied = commands.len();
            // One reading of the clock per batch: a batch is one socket read's worth.
            let now = clock.now();
            for command in commands {
                if let Command::ConnectionClosed { conn } = &command {
                    mailboxes.remove(conn);
                }
                broker.handle_command(command, now);
            }
            budget.give_back(taken);
            return applied.max(1);
        }
        BrokerInput::Job(job) => jobs.run(job, broker, clock.now()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(conn: u64) -> Command {
        Command::ConnectionClosed { conn: ConnectionId(conn) }
    }

    /// Commands take room from the budget until the broker task gives it back: a connection
    /// whose batch does not fit waits (unread meanwhile), then goes in order.
    #[tokio::test]
    async fn commands_wait_while_the_budget_is_spent() {
        let (inputs, budget, mut received) = input_queue();
        budget.send(&inputs, vec![closed(1); MAX_WAITING_COMMANDS]).await.unwrap();
        let waiting = tokio::spawn({
            let (inputs, budget) = (inputs.clone(), budget.clone());
            async move { budget.send(&inputs, vec![closed(2)]).await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "sent past the budget");
        let Some(BrokerInput::Commands { commands, budget: taken }) = received.recv().await else {
            panic!("the first batch")
        };
        assert_eq!((commands.len(), taken as usize), (MAX_WAITING_COMMANDS, MAX_WAITING_COMMANDS));
        budget.give_back(taken);
        waiting.await.unwrap().unwrap();
        let Some(BrokerInput::Commands { commands, budget: 1 }) = received.recv().await else {
            panic!("the second batch")
        };
        assert_eq!(commands, vec![closed(2)]);
    }
}
