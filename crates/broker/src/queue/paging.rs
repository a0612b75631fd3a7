//! Paging (ADR 0007): a durable queue keeps the bodies of its head in memory and only the store
//! location of the rest. This file holds the policy (when to page out, how much to read ahead)
//! and each queue's [`Pager`]: the injected [`MessageSource`], the read of its paged head it asked
//! the driver for ([`MessageRead`], `message_reads.rs`) and the ids of messages that could not be
//! read back (settled by the broker, `Broker::reschedule`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use super::entry::{Entry, Paged, Payload, Seq};
use super::far_files::SpillFiles;
use crate::message::Message;
use crate::persist::{decode_record, MessageSource, RecordLocation};

/// Resident messages a queue keeps before it pages newly stored ones out (default).
pub const MAX_RESIDENT_MESSAGES_DEFAULT: usize = 10_000;
/// Resident body bytes a queue keeps before it pages newly stored ones out (default: 64 MiB).
pub const MAX_RESIDENT_BYTES_DEFAULT: usize = 64 << 20;
/// Paged messages one read for dead-lettering asks for (`Broker::poll_message_read`): enough to
/// amortise the reads, few enough that the answer is dead-lettered in one short broker turn.
pub const READ_AHEAD: usize = 256;

/// Paged messages one read for consumers asks for at most (`PagingLimits::consumer_read`): a
/// consumer without prefetch limit (no-ack) on a deep paged queue gets this many per answer, so
/// it cannot make the broker read the whole queue into memory in one go, and the driver
/// flushes deliveries (and hears of a connection that cannot keep up) between answers.
pub const CONSUMER_READ_MAX: u64 = 1024;

/// How much of a queue stays in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagingLimits {
    pub max_resident_messages: usize,
    pub max_resident_bytes: usize,
}

impl Default for PagingLimits {
    fn default() -> Self {
        PagingLimits {
            max_resident_messages: MAX_RESIDENT_MESSAGES_DEFAULT,
            max_resident_bytes: MAX_RESIDENT_BYTES_DEFAULT,
        }
    }
}

impl PagingLimits {
    /// Whether a queue with `resident` messages of `resident_bytes` in memory pages out a
    /// message the store has just made durable (it sits behind all of them).
    pub fn pages_out(&self, resident: usize, resident_bytes: usize) -> bool {
        resident > self.max_resident_messages || resident_bytes > self.max_resident_bytes
    }

    /// How many paged messages one read for dead-lettering asks for: a batch, never more than
    /// the queue may hold in memory (at least one).
    pub fn read_ahead(&self) -> usize {
        READ_AHEAD.min(self.max_resident_messages).max(1)
    }

    /// How many paged messages one read for a consumer asks for (`MessageRead`): up to
    /// `CONSUMER_READ_MAX`, so that the broker's turns (and the writes of their deliveries) stay
    /// large; never more than the queue may hold in memory, at least one.
    pub fn consumer_read(&self) -> usize {
        (CONSUMER_READ_MAX as usize).min(self.max_resident_messages).max(1)
    }
}

/// A queue's access to the store for its paged messages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pager {
    /// None: nothing is ever paged (no store; tests; non-durable queues still get one but never
    /// hold paged entries, as only persisted messages are paged).
    source: Option<Arc<dyn MessageSource>>,
    /// Where far-future delayed messages wait (ADR 0013); None: they stay in memory.
    spill: Option<Arc<dyn SpillFiles>>,
    pub limits: PagingLimits,
    /// Store ids of messages whose record could not be read back: dropped, to be settled.
    lost: Vec<u64>,
    /// Messages dropped because they could not be read back, over the queue's life.
    pub unreadable: u64,
    /// Messages read back, over the queue's life.
    pub reads: u64,
    /// The paged head's locations this queue asked to have read, not yet collected by the
    /// broker (`take_ask`).
    asked: Option<Vec<RecordLocation>>,
    /// Whether a read it asked for is out (asked or collected, not yet answered): it asks for
    /// no other meanwhile.
    reading: bool,
    /// The ready message the read out was asked from (`None`: the head), where its answer is
    /// put in memory, and how many ready messages from there it was asked among.
    reading_from: Option<Seq>,
    reading_span: usize,
    /// Locations the last answer could not read: their messages are dropped when they are to
    /// be taken, not asked for again.
    unreadable_at: Vec<RecordLocation>,
}

/// A queue's ask for the records of the paged messages at its head, for the driver to read off
/// the broker's thread (`MessageRead::perform`) and hand back (`Broker::handle_message_read`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRead {
    /// The asking queue's number.
    pub queue: u64,
    /// The records to read, the head's first.
    pub locations: Vec<RecordLocation>,
    /// What the messages are read for.
    pub purpose: ReadPurpose,
}

/// What a [`MessageRead`] is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPurpose {
    /// The queue's paged head (or the message its groups chose), for its consumers, basic.gets
    /// (the HTTP API's too: `Queue::ask_read_for_get`) and SQS receives
    /// (`Queue::take_for_consumer`, `waiting_gets.rs`).
    Consumers,
    /// Paged messages that left the queue for its dead-letter exchange (`dead_letter_reads.rs`).
    DeadLettering,
}

impl MessageRead {
    /// Reads and decodes each record through `source`, in the order asked (run it where a
    /// read may wait on the disk).
    pub fn perform(&self, source: Option<&dyn MessageSource>) -> Vec<Result<Message, String>> {
        let Some(source) = source else { return self.perform_each(|at| read_message(None, at)) };
        let decode = |record: Result<Bytes, String>| {
            decode_record(record?).ok_or_else(|| "the stored record does not decode".to_owned())
        };
        source.read_many(&self.locations).into_iter().map(decode).collect()
    }

    /// [`MessageRead::perform`] record by record, each read by `read` (a driver's wrapper around
    /// [`MessageRead::read_one`], e.g. one that turns a panic into that record's error).
    pub fn perform_each(
        &self,
        read: impl FnMut(RecordLocation) -> Result<Message, String>,
    ) -> Vec<Result<Message, String>> {
        self.locations.iter().copied().map(read).collect()
    }

    /// Reads and decodes the record at `at` through `source`.
    pub fn read_one(source: Option<&dyn MessageSource>, at: RecordLocation) -> Result<Message, String> {
        read_message(source, at)
    }
}

/// The messages an answer read, taken as the head is walked again: in the order asked, which is
/// the head's order unless it changed while the read was out; then by location.
#[derive(Default)]
pub(crate) struct ReadBack {
    in_order: VecDeque<(RecordLocation, Message)>,
    by_location: HashMap<RecordLocation, Message>,
}

impl ReadBack {
    /// The messages read at `locations` (`messages`, in the same order), and the locations that
    /// could not be read.
    pub fn new(
        locations: &[RecordLocation],
        messages: Vec<Result<Message, String>>,
    ) -> (Self, Vec<RecordLocation>) {
        let (mut read, mut unreadable) = (ReadBack::default(), Vec::new());
        for (&at, message) in locations.iter().zip(messages) {
            match message {
                Ok(message) => read.in_order.push_back((at, message)),
                Err(reason) => {
                    tracing::warn!(?at, %reason, "a paged message cannot be read back");
                    unreadable.push(at);
                }
            }
        }
        (read, unreadable)
    }

    /// The message read at `at`, once.
    pub fn take(&mut self, at: RecordLocation) -> Option<Message> {
        match self.in_order.front() {
            Some((next, _)) if *next == at => self.in_order.pop_front().map(|(_, message)| message),
            _ => {
                self.by_location.extend(self.in_order.drain(..));
                self.by_location.remove(&at)
            }
        }
    }
}

/// Reads and decodes the record at `location` through `source`.
fn read_message(source: Option<&dyn MessageSource>, location: RecordLocation) -> Result<Message, String> {
    let record = source.ok_or("no message source attached")?.read(location)?;
    decode_record(record).ok_or_else(|| "the stored record does not decode".to_owned())
}

impl Pager {
    /// Reads paged messages back through `source` from now on.
    pub fn set_source(&mut self, source: Arc<dyn MessageSource>) {
        self.source = Some(source);
    }

    /// Queues made with this pager keep far-future delayed messages in `spill`.
    pub fn set_spill_files(&mut self, spill: Arc<dyn SpillFiles>) {
        self.spill = Some(spill);
    }

    pub fn spill_files(&self) -> Option<Arc<dyn SpillFiles>> {
        self.spill.clone()
    }

    /// Whether messages may be paged out (a source to read them back is attached).
    pub fn enabled(&self) -> bool {
        self.source.is_some()
    }

    pub fn source(&self) -> Option<Arc<dyn MessageSource>> {
        self.source.clone()
    }

    /// Reads and decodes the record at `location`.
    pub fn read_record(&self, location: RecordLocation) -> Result<Message, String> {
        read_message(self.source.as_deref(), location)
    }

    /// The message of a paged entry, read back.
    pub fn read(&self, paged: &Paged) -> Result<Arc<Message>, String> {
        self.read_record(paged.location()).map(Arc::new)
    }

    /// The message of a payload without changing it: in memory, unpacked from a copy, or read
    /// back when paged.
    pub fn message_of(&self, payload: &Payload) -> Result<Arc<Message>, String> {
        match payload {
            Payload::Resident(message) => Ok(message.clone()),
            Payload::Packed(packed) => packed.message_view().map(Arc::new).ok_or_else(undecodable),
            Payload::Paged(paged) => self.read(paged),
        }
    }

    /// Puts the message of `payload` in memory: a packed one is unpacked, a paged one read back
    /// from the store (counted in `reads`). On failure the message is lost: drop its entry. The
    /// takes hand it no paged one (they ask for its read: `Queue::ask_read`); reading one here,
    /// on the broker's thread, is a fallback no caller relies on.
    pub fn make_resident(&mut self, payload: &mut Payload) -> Result<(), String> {
        let message = match payload {
            Payload::Resident(_) => return Ok(()),
            Payload::Packed(packed) => packed.take_message().ok_or_else(undecodable)?,
            Payload::Paged(paged) => {
                let message = self.read_record(paged.location())?;
                self.reads += 1;
                message
            }
        };
        *payload = Payload::Resident(Arc::new(message));
        Ok(())
    }

    /// Makes `entry` resident. On failure the message is counted and noted as lost (its store
    /// id is settled later) and `false` comes back: drop the entry.
    pub fn page_in(&mut self, entry: &mut Entry) -> bool {
        let location = match &entry.payload {
            Payload::Resident(_) => return true,
            Payload::Packed(_) => None,
            Payload::Paged(paged) => Some(paged.location()),
        };
        let Err(reason) = self.make_resident(&mut entry.payload) else { return true };
        self.drop_unreadable(entry, location, &reason);
        false
    }

    /// Counts `entry`, whose message cannot be read back, and notes it lost.
    pub fn drop_unreadable(&mut self, entry: &Entry, location: Option<RecordLocation>, reason: &str) {
        tracing::warn!(
            msg_id = entry.persist_id(),
            ?location,
            %reason,
            "a message cannot be made resident again; dropped"
        );
        self.unreadable += 1;
        self.lost.extend(entry.persist_id());
    }

    /// Whether a read this pager asked for is out.
    pub fn reading(&self) -> bool {
        self.reading
    }

    /// Asks for the records at `locations`, among the `span` ready messages from `from` on
    /// (`None`: the head), to be read (nothing when empty).
    pub fn ask(&mut self, locations: Vec<RecordLocation>, from: Option<Seq>, span: usize) {
        if !locations.is_empty() {
            self.asked = Some(locations);
            self.reading = true;
            self.reading_from = from;
            self.reading_span = span;
        }
    }

    /// The read this pager asked for, once.
    pub fn take_ask(&mut self) -> Option<Vec<RecordLocation>> {
        self.asked.take()
    }

    /// Takes the answer to the read asked for: the messages read, by location, the ready
    /// message they were asked from and the span they were asked among (`ask`). Those that
    /// could not be read are kept to be dropped when they are to be taken (`is_unreadable`).
    pub fn answered(
        &mut self,
        locations: &[RecordLocation],
        messages: Vec<Result<Message, String>>,
    ) -> (ReadBack, Option<Seq>, usize) {
        self.reading = false;
        let (read, unreadable) = ReadBack::new(locations, messages);
        self.unreadable_at = unreadable;
        (read, self.reading_from.take(), std::mem::take(&mut self.reading_span))
    }

    /// Whether the last answer could not read `entry`'s message.
    pub fn is_unreadable(&self, entry: &Entry) -> bool {
        entry.paged_at().is_some_and(|at| self.is_unreadable_at(at))
    }

    /// Whether the last answer could not read the record at `at`.
    pub fn is_unreadable_at(&self, at: RecordLocation) -> bool {
        self.unreadable_at.contains(&at)
    }

    /// Drops `entry`, whose message the last answer could not read (`is_unreadable`).
    pub fn drop_unread(&mut self, entry: &Entry) {
        let Some(location) = entry.paged_at() else { return };
        self.unreadable_at.retain(|&at| at != location);
        self.drop_unreadable(entry, Some(location), "its read failed");
    }

    /// Puts the message read for a paged `payload` in memory, taken from `read`; `false` when
    /// `read` has none for it.
    pub fn resident_from(&mut self, read: &mut ReadBack, payload: &mut Payload) -> bool {
        let Payload::Paged(paged) = payload else { return false };
        let Some(message) = read.take(paged.location()) else { return false };
        *payload = Payload::Resident(Arc::new(message));
        self.reads += 1;
        true
    }

    /// The store ids of messages dropped as unreadable since the last call.
    pub fn take_lost(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.lost)
    }
}

fn undecodable() -> String {
    "the packed message does not decode".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue pages out only past either limit; at the limit it keeps everything.
    #[test]
    fn pages_out_past_either_limit() {
        let limits = PagingLimits { max_resident_messages: 10, max_resident_bytes: 1000 };
        assert!(!limits.pages_out(10, 1000));
        assert!(limits.pages_out(11, 0));
        assert!(limits.pages_out(1, 1001));
    }

    /// Read-ahead is a batch, bounded by the resident limit but never zero.
    #[test]
    fn read_ahead_is_bounded() {
        assert_eq!(PagingLimits::default().read_ahead(), READ_AHEAD);
        let small = PagingLimits { max_resident_messages: 3, max_resident_bytes: 0 };
        assert_eq!(small.read_ahead(), 3);
        let none = PagingLimits { max_resident_messages: 0, max_resident_bytes: 0 };
        assert_eq!(none.read_ahead(), 1);
        assert_eq!(PagingLimits::default().consumer_read(), CONSUMER_READ_MAX as usize);
        assert_eq!((small.consumer_read(), none.consumer_read()), (3, 1));
    }

    fn at(offset: u32) -> RecordLocation {
        RecordLocation { segment: 1, offset, record_bytes: 100 }
    }

    fn message(body: &'static str) -> Message {
        use hourglass_wire::ShortStr;
        let properties = hourglass_wire::EncodedProperties::from(&hourglass_wire::BasicProperties::default());
        Message::new(ShortStr::from_static(""), ShortStr::from_static("q"), properties, body.into())
    }

    /// An answer's messages are taken in the order asked, and by location once the head's
    /// order changed while the read was out; each once, and none that was not read.
    #[test]
    fn an_answer_is_taken_in_order_then_by_location() {
        let mut pager = Pager::default();
        let asked = [at(10), at(20), at(30), at(40)];
        let answer = vec![Ok(message("a")), Ok(message("b")), Err("gone".to_owned()), Ok(message("d"))];
        let (mut read, _, _) = pager.answered(&asked, answer);
        let body = |m: Option<Message>| m.map(|m| m.body);
        assert_eq!(body(read.take(at(10))), Some("a".into()));
        assert_eq!(body(read.take(at(40))), Some("d".into()), "out of order");
        assert_eq!(body(read.take(at(20))), Some("b".into()));
        assert_eq!(body(read.take(at(20))), None, "once");
        assert_eq!(body(read.take(at(30))), None, "not read");
        assert_eq!(pager.unreadable_at, [at(30)]);
    }

    /// Without a source a paged entry cannot be read: it is counted, noted lost, and dropped.
    #[test]
    fn an_unreadable_entry_is_noted_lost() {
        use crate::message::Hot;
        let location = RecordLocation { segment: 1, offset: 64, record_bytes: 100 };
        let paged = Paged::new(location, Hot::new(None, 0, true), 10).unwrap();
        let mut entry = Entry::with_payload(0, Payload::Paged(paged), None, None, Some(42));
        let mut pager = Pager::default();
        assert!(!pager.page_in(&mut entry));
        assert_eq!((pager.unreadable, pager.take_lost()), (1, vec![42]));
        assert!(pager.take_lost().is_empty());
    }
}
