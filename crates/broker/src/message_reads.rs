//! Reading paged messages back for consumers, basic.gets, SQS receives and dead-lettering
//! (ADR 0007) off the broker's thread (ARCHITECTURE.md, rule 1): a queue whose head is paged
//! (in a queue with message groups, the message they chose) asks for it and a batch behind it (`Queue::take_for_consumer`, for a consumer, a basic.get
//! (`waiting_gets.rs`) or an SQS receive) instead of reading the store; so do paged messages leaving for a
//! dead-letter exchange (`dead_letter_reads.rs`, which asks when the driver polls). The asks are collected when the
//! queue is filed again (`Broker::reschedule`), handed to the driver (`poll_message_read`),
//! performed by it where a read may wait on the disk ([`MessageRead::perform`] through
//! [`Broker::message_source`]), and come back as an input (`handle_message_read`), which runs
//! the queue the messages came for.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::persist::MessageSource;
use crate::queue::{MessageRead, QueueId, ReadPurpose};
use crate::time::Timestamp;

impl Broker {
    /// The next read of paged messages for the driver to perform ([`MessageRead::perform`]),
    /// its outcome handed to [`Broker::handle_message_read`]. A dead-lettering read asks for a
    /// read-ahead (256): dead-lettering one costs far more than delivering one, and the answer is
    /// dead-lettered in one broker turn (measured: the other traffic's p99 while a 1M TTL
    /// backlog dead-letters is 14 ms with 256, 30 ms with 1,024; docs/benchmarks.md).
    pub fn poll_message_read(&mut self) -> Option<MessageRead> {
        let max = self.queues.pager.limits.read_ahead();
        self.queues.next_message_read().or_else(|| self.dead_letter_reads.next_read(max))
    }

    /// Where the reads are performed (none without `set_message_source`).
    pub fn message_source(&self) -> Option<Arc<dyn MessageSource>> {
        self.queues.pager.source()
    }

    /// A read's outcome, one per location asked. For consumers the queue puts the messages still
    /// where they were asked from in memory (one that could not be read is dropped when it is to
    /// be taken), answers the basic.gets waiting for them (`waiting_gets.rs`) and wakes the
    /// HTTP API's (which get again after the clients' have been answered), runs, and wakes
    /// the SQS receives waiting on it (`Broker::sqs_wait`; AMQP consumers with credit have taken their
    /// share by then); for dead-lettering they leave (`dead_letter_reads.rs`). An answer for a
    /// queue that is gone is dropped.
    pub fn handle_message_read(
        &mut self,
        read: MessageRead,
        messages: Vec<Result<Message, String>>,
        now: Timestamp,
    ) {
        if read.purpose == ReadPurpose::DeadLettering {
            return self.dead_letters_read(&read, messages, now);
        }
        let id = QueueId(read.queue);
        let Some(queue) = self.queues.get_mut(&id) else { return };
        queue.messages_read(&read.locations, messages);
        self.answer_waiting_gets(id, now);
        self.wake_http_gets(id);
        self.run_queue(id, now);
        self.wake_every_sqs_waiter(id);
        self.run_dead_letters(now);
    }
}
