//! Listing a far tier's messages in (due, id) order without taking them (the management API's
//! delayed-message listings and searches): a merge of the write buffer and every run, reading
//! each run's file a few records at a time, each record checked as a load checks it (cancelled
//! ones the run's head has passed over let through, and skipped), or reading the run's roster
//! instead once its file fails.
//!
//! The broker's thread reads no file for it (ARCHITECTURE.md rule 1): it takes a [`FarListing`]
//! (`FarTier::listing`: the buffer, the runs' bounds and rosters, the cancelled keys; O(runs +
//! buffer + cancelled), no read), and the listing runs on it where a read may wait on the disk.
//! A run loaded from meanwhile is read in its unchanged file; one deleted or written again (a file
//! of its own name: `Run::file`) is listed from the listing's roster, as a damaged one is.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use super::{
    checked, file_name, held, FarTier, Key, Record, Run, Seq, SpillFiles, LIST_CHUNK, READ_CHUNK,
    RECORD_BYTES,
};
use crate::queue::delay::Waiting;
use crate::queue::far_record::{decode, key_of};
use crate::time::Timestamp;

/// What listing a far tier needs, taken from it (`FarTier::listing`) to list elsewhere.
#[derive(Clone, Debug)]
pub(crate) struct FarListing {
    files: Arc<dyn SpillFiles>,
    queue: u64,
    buffer: Vec<Record>,
    runs: HashMap<u64, Run>,
    cancelled: Arc<HashSet<(u64, Key)>>,
}

impl FarTier {
    /// What [`FarListing::after`] lists after `cursor`, up to `limit`, without reading a file:
    /// of the write buffer, only the `limit` first after the cursor.
    pub(crate) fn listing(&self, cursor: Option<(Timestamp, Seq)>, limit: usize) -> FarListing {
        let after = cursor.map(|(due, id)| (due.as_millis(), id));
        let mut buffer: Vec<Record> =
            self.buffer.iter().filter(|r| after.is_none_or(|a| key_of(r.as_slice()) > a)).copied().collect();
        if buffer.len() > limit {
            buffer.select_nth_unstable_by_key(limit, |r| key_of(r.as_slice()));
            buffer.truncate(limit);
        }
        FarListing {
            files: self.files.clone(),
            queue: self.queue,
            buffer,
            runs: self.runs.clone(),
            cancelled: self.cancelled.clone(),
        }
    }

    /// [`FarListing::after`] of this tier, here (tests).
    #[cfg(test)]
    pub fn after(&self, cursor: Option<(Timestamp, Seq)>, limit: usize) -> Vec<(Timestamp, Waiting)> {
        self.listing(cursor, limit).after(cursor, limit)
    }
}

impl FarListing {
    /// Up to `limit` messages after `cursor` in (due, id) order, without taking them: a merge of
    /// the buffer and every run from the cursor on, reading each run a few records at a time,
    /// so a page costs about `limit` records plus a binary search and one small read per run (a
    /// run whose file fails is listed from its roster). Run it where a read may wait on the disk.
    pub fn after(&self, cursor: Option<(Timestamp, Seq)>, limit: usize) -> Vec<(Timestamp, Waiting)> {
        let after = cursor.map(|(due, id)| (due.as_millis(), id));
        let mut buffered: Vec<&Record> =
            self.buffer.iter().filter(|r| after.is_none_or(|a| key_of(r.as_slice()) > a)).collect();
        buffered.sort_unstable_by_key(|r| key_of(r.as_slice()));
        let mut readers: Vec<RunReader> =
            self.runs.keys().map(|&run| RunReader::new(self, run, after)).collect();
        // The next record of each source by key; source `readers.len()` is the buffer.
        let mut heads = std::collections::BinaryHeap::new();
        for (source, reader) in readers.iter_mut().enumerate() {
            if let Some(key) = reader.peek(self) {
                heads.push(std::cmp::Reverse((key, source)));
            }
        }
        let mut next_buffered = 0;
        if let Some(record) = buffered.first() {
            heads.push(std::cmp::Reverse((key_of(record.as_slice()), readers.len())));
        }
        let mut found = Vec::new();
        while found.len() < limit {
            let Some(std::cmp::Reverse((key, source))) = heads.pop() else { break };
            let record = if source == readers.len() {
                let record = *buffered[next_buffered];
                next_buffered += 1;
                if let Some(next) = buffered.get(next_buffered) {
                    heads.push(std::cmp::Reverse((key_of(next.as_slice()), source)));
                }
                record
            } else {
                let reader = &mut readers[source];
                let record = reader.take();
                if let Some(key) = reader.peek(self) {
                    heads.push(std::cmp::Reverse((key, source)));
                }
                if self.cancelled.contains(&(reader.run, key)) {
                    continue;
                }
                record
            };
            if let Ok(message) = decode(&record) {
                found.push(message);
            }
        }
        found
    }

    /// The key of the record at `at` in run `run`'s file, if it checks out.
    fn key_at(&self, run: u64, at: u64) -> Result<Key, String> {
        let record = self.read_records(run, at, 1)?;
        self.listed_key(run, &record).ok_or_else(|| format!("record {at} does not check out"))
    }

    /// The first index at or after the run's cursor whose key is not `before` (a binary search
    /// by positioned reads: the run is sorted).
    fn first_not(&self, run: u64, before: impl Fn(Key) -> bool) -> Result<u64, String> {
        let Some(r) = self.runs.get(&run) else { return Ok(0) };
        let (mut low, mut high) = (r.cursor, r.len);
        while low < high {
            let mid = low + (high - low) / 2;
            if before(self.key_at(run, mid)?) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(low)
    }

    fn read_records(&self, run: u64, from: u64, count: u64) -> Result<Vec<u8>, String> {
        let name = file_name(self.queue, run, self.runs.get(&run).map_or(0, |r| r.file));
        self.files.read_at(&name, from * RECORD_BYTES as u64, count as usize * RECORD_BYTES)
    }

    /// Run `run`'s record read from its file, if it checks out as a load's does (`checked`) or
    /// is a cancelled record its head was moved past (`pass_head`): its key.
    fn listed_key(&self, run: u64, record: &[u8]) -> Option<Key> {
        let r = self.runs.get(&run)?;
        let (key, ..) = checked(record, (0, 0), r.ids)?;
        (key >= r.head || self.cancelled.contains(&(run, key))).then_some(key)
    }

    /// The records run `run` still holds after `after`, from its roster.
    fn held(&self, run: u64, after: Option<Key>) -> Vec<Record> {
        held(&self.runs, &self.cancelled, run, after)
    }
}

/// A run read forward for a listing: a small chunk at a time, growing as it is used; from its
/// roster instead once its file fails.
struct RunReader {
    run: u64,
    /// The last key read (or the listing's cursor): the next must come after it.
    last: Option<Key>,
    from_file: Option<FileReader>,
    held: VecDeque<Record>,
}

struct FileReader {
    at: u64,
    end: u64,
    chunk: Vec<u8>,
    pos: usize,
}

impl RunReader {
    /// Run `run` read from after `after`.
    fn new(tier: &FarListing, run: u64, after: Option<Key>) -> Self {
        let mut reader = RunReader { run, last: after, from_file: None, held: VecDeque::new() };
        let Some(r) = tier.runs.get(&run) else { return reader };
        let start = match after {
            Some(after) if r.on_file => tier.first_not(run, |key| key <= after).ok(),
            _ => r.on_file.then_some(r.cursor),
        };
        match start {
            Some(at) => reader.from_file = Some(FileReader { at, end: r.len, chunk: Vec::new(), pos: 0 }),
            None => reader.held = tier.held(run, after).into(),
        }
        reader
    }

    /// The key of the next record (`None`: the run ends here).
    fn peek(&mut self, tier: &FarListing) -> Option<Key> {
        let Some(file) = &mut self.from_file else { return self.held.front().map(|record| key_of(record)) };
        match file.next_checked(tier, self.run, self.last) {
            Ok(next) => next,
            Err(()) => {
                self.from_file = None;
                self.held = tier.held(self.run, self.last).into();
                self.held.front().map(|record| key_of(record))
            }
        }
    }

    /// The record `peek` looked at.
    fn take(&mut self) -> Record {
        let record = match &mut self.from_file {
            Some(file) => {
                let mut record = [0u8; RECORD_BYTES];
                record.copy_from_slice(&file.chunk[file.pos..file.pos + RECORD_BYTES]);
                file.pos += RECORD_BYTES;
                file.at += 1;
                record
            }
            None => self.held.pop_front().unwrap_or([0u8; RECORD_BYTES]),
        };
        self.last = Some(key_of(&record));
        record
    }
}

impl FileReader {
    /// The key of the next record, reading a chunk when the last one is used up; `Err` when the
    /// file does not read back or the record does not check out (or come after `last`).
    fn next_checked(&mut self, tier: &FarListing, run: u64, last: Option<Key>) -> Result<Option<Key>, ()> {
        if self.pos == self.chunk.len() {
            let read_so_far = self.chunk.len() / RECORD_BYTES;
            let count = (self.end - self.at).min((read_so_far * 2).clamp(LIST_CHUNK, READ_CHUNK) as u64);
            if count == 0 {
                return Ok(None);
            }
            self.chunk = tier.read_records(run, self.at, count).map_err(|_| ())?;
            self.pos = 0;
        }
        let key = tier.listed_key(run, &self.chunk[self.pos..self.pos + RECORD_BYTES]).ok_or(())?;
        if last.is_some_and(|last| key <= last) {
            return Err(());
        }
        Ok(Some(key))
    }
}
