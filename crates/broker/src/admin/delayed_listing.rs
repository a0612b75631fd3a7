//! The HTTP API's listings of a queue's delayed messages (a peek, a search by `message_id`),
//! finished off the broker's thread (ARCHITECTURE.md rule 1, issue 41). On the broker's thread a
//! listing takes what it can without a read ([`Listed::snapshot`]): the near tier's messages (in
//! memory, or where they are stored when paged out) and the far tier's listing (`FarListing`:
//! its buffer, runs and rosters, no file read). Its caller then merges them in due order, reading
//! the far tier's spill files, and reads the records of the paged messages, where a read may
//! wait on the disk (`DelayedPeek::read_stored`, `DelayedMatches::found`).

use std::sync::Arc;

use super::delayed::{DelayedKey, DelayedMessage, DelayedSlice};
use crate::message::Message;
use crate::persist::{MessageSource, RecordLocation};
use crate::queue::entry::{Entry, Payload};
use crate::queue::far_delays::FarListing;
use crate::queue::{MessageRead, Queue};

/// The delayed messages a peek found, in due order, finished by [`DelayedPeek::read_stored`].
#[derive(Debug)]
pub struct DelayedPeek {
    pub(super) listed: Listed,
    pub(super) limit: usize,
    pub(super) source: Option<Arc<dyn MessageSource>>,
}

impl DelayedPeek {
    /// The first messages, in due order, the far tier's read from its spill files and the paged
    /// ones' records from the store (run it where a read may wait on the disk); one that cannot
    /// be read is left out and logged. The listing ends before the first paged one whose record
    /// would take the records read past `record_bytes_max` (the first is always read): a record
    /// is read whole, however little of its body a listing shows.
    pub fn read_stored(self, record_bytes_max: usize) -> Vec<DelayedMessage> {
        let source = self.source;
        let mut read_bytes = 0usize;
        self.listed
            .merged(None, self.limit)
            .into_iter()
            .take_while(|(_, found)| {
                let Found::Stored(at) = found else { return true };
                let within = read_bytes == 0 || read_bytes + at.record_bytes as usize <= record_bytes_max;
                read_bytes += at.record_bytes as usize;
                within
            })
            .filter_map(|(key, found)| {
                let message = read_found(&source, key.id, &found)?;
                Some(DelayedMessage { id: key.id, due: key.due, message })
            })
            .collect()
    }
}

/// One slice of a search by `message_id` (`Broker::delayed_with_message_id`), finished by
/// [`DelayedMatches::found`].
#[derive(Debug)]
pub struct DelayedMatches {
    pub(super) listed: Listed,
    pub(super) cursor: Option<DelayedKey>,
    pub(super) slice: DelayedSlice,
    pub(super) message_id: String,
    pub(super) source: Option<Arc<dyn MessageSource>>,
}

impl DelayedMatches {
    /// The messages of the slice whose `message_id` is the one searched for, in due order, and
    /// where the next slice starts (`None`: the search is over). The slice is at most `examined`
    /// messages after the cursor, and ends before a paged one past `reads` or past `read_bytes`
    /// of records (the first always). Run it where a read may wait on the disk: the far tier's
    /// files and the paged messages' records are read here (one that cannot be is left out and
    /// logged).
    pub fn found(self) -> (Vec<DelayedKey>, Option<DelayedKey>) {
        let DelayedMatches { listed, cursor, slice, message_id, source } = self;
        let examined = slice.examined.max(1);
        let candidates = listed.merged(cursor, examined);
        let complete = candidates.len() < examined;
        let (mut stored, mut stored_bytes, mut last) = (0, 0usize, None);
        let mut taken = Vec::new();
        for (key, found) in candidates {
            if let Found::Stored(at) = &found {
                let bytes = at.record_bytes as usize;
                let over_bytes = stored > 0 && stored_bytes + bytes > slice.read_bytes;
                if stored == slice.reads.max(1) || over_bytes {
                    return (matching(taken, &message_id, &source), last);
                }
                (stored, stored_bytes) = (stored + 1, stored_bytes + bytes);
            }
            last = Some(key);
            taken.push((key, found));
        }
        (matching(taken, &message_id, &source), if complete { None } else { last })
    }
}

/// The keys of `candidates` whose message has `message_id`, the paged ones read.
fn matching(
    candidates: Vec<(DelayedKey, Found)>,
    message_id: &str,
    source: &Option<Arc<dyn MessageSource>>,
) -> Vec<DelayedKey> {
    let matches = |message: Arc<Message>| {
        message.properties().message_id().is_some_and(|id| id.as_bytes() == message_id.as_bytes())
    };
    candidates
        .into_iter()
        .filter(|(key, found)| read_found(source, key.id, found).is_some_and(matches))
        .map(|(key, _)| key)
        .collect()
}

/// What a listing took on the broker's thread: the near tier's messages after its cursor, up to
/// its limit, and the far tier's listing.
#[derive(Debug)]
pub(super) struct Listed {
    near: Vec<(DelayedKey, Found)>,
    far: Option<FarListing>,
}

impl Listed {
    /// Queue `queue`'s delayed messages after `cursor`, up to `limit`, without a read.
    pub(super) fn snapshot(queue: &Queue, cursor: Option<DelayedKey>, limit: usize) -> Listed {
        let (near, far) = queue.delayed.listing(cursor.map(|key| (key.due, key.id)), limit);
        let near = near
            .into_iter()
            .map(|(due, waiting)| {
                (DelayedKey { due, id: waiting.entry.seq }, found_of(queue, &waiting.entry))
            })
            .collect();
        Listed { near, far }
    }

    /// Up to `limit` messages after `cursor` in due order: the near tier's and the far tier's
    /// (whose files are read here).
    fn merged(self, cursor: Option<DelayedKey>, limit: usize) -> Vec<(DelayedKey, Found)> {
        let Listed { mut near, far } = self;
        if let Some(far) = far {
            let listed = far.after(cursor.map(|key| (key.due, key.id)), limit);
            near.extend(listed.into_iter().map(|(due, waiting)| {
                let key = DelayedKey { due, id: waiting.entry.seq };
                (key, found_far(&waiting.entry))
            }));
            near.sort_unstable_by_key(|(key, _)| (key.due, key.id));
            near.truncate(limit);
        }
        near
    }
}

/// A delayed message's content as a listing found it.
#[derive(Debug)]
pub(super) enum Found {
    InMemory(Arc<Message>),
    /// Paged out (ADR 0007): its record, to be read off the broker's thread.
    Stored(RecordLocation),
    /// Packed, and its box does not decode (logged): listed as nothing.
    Undecodable,
}

/// A delayed entry's message as a listing finds it on the broker's thread: in memory (a packed
/// one unpacked), or where it is stored when paged.
fn found_of(queue: &Queue, entry: &Entry) -> Found {
    if let Payload::Paged(paged) = &entry.payload {
        return Found::Stored(paged.location());
    }
    match queue.pager.message_of(&entry.payload) {
        Ok(message) => Found::InMemory(message),
        Err(reason) => {
            cannot_read(entry.seq, &reason);
            Found::Undecodable
        }
    }
}

/// A far tier's entry (a far record: stored, so paged) as a listing finds it.
fn found_far(entry: &Entry) -> Found {
    match &entry.payload {
        Payload::Paged(paged) => Found::Stored(paged.location()),
        Payload::Resident(message) => Found::InMemory(message.clone()),
        Payload::Packed(_) => Found::Undecodable,
    }
}

/// The message `found`, its record read through `source` when stored; `None` (logged) when it
/// cannot be.
fn read_found(source: &Option<Arc<dyn MessageSource>>, id: u64, found: &Found) -> Option<Arc<Message>> {
    match found {
        Found::InMemory(message) => Some(message.clone()),
        Found::Stored(at) => MessageRead::read_one(source.as_deref(), *at)
            .map(Arc::new)
            .map_err(|reason| cannot_read(id, &reason))
            .ok(),
        Found::Undecodable => None,
    }
}

fn cannot_read(seq: u64, reason: &str) {
    tracing::warn!(seq, %reason, "delayed message cannot be read back");
}
