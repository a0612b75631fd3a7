//! The far tier of a queue's delayed messages (ADR 0013, phase 1): a paged-out delayed message
//! due past the near horizon is kept only as a fixed-size record in a spill file, and comes back
//! into the delay index's near tier a horizon ahead of its due time. In memory a far tier keeps a
//! bounded write buffer and a few words per file, nothing per message.
//!
//! Records are buffered, then sorted by (due, id) and written as a *run*: a file written once and
//! read front to back as its records fall due (each run has a read cursor; the runs' heads are
//! ordered by due time, so a load reads only runs with something due). Cancelled records are
//! tombstoned by position until the cursor passes them.
//!
//! The spill files are not durable state. The store's log is: a delayed message is an enqueue
//! record carrying its due time, and a restore rebuilds the far tier from the recovered messages.
//! So a spill record that does not read back intact (checksum) is counted and left out, never
//! settled: its message is still in the log and comes back at the next restart.
//!
//! Leaves to others: which messages go far and when they load (`delay.rs`), firing due messages
//! (`Broker::promote_due`), the files themselves (an injected [`SpillFiles`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use super::delay::Waiting;
use super::entry::{Entry, Paged, Payload, Seq};
use crate::message::Hot;
use crate::persist::RecordLocation;
use crate::time::Timestamp;

/// Files a far tier writes once and reads back by position. Called from the broker's thread:
/// keep them plain writes and positioned reads. The server's is a directory emptied at start.
pub trait SpillFiles: Send + Sync + fmt::Debug {
    /// Creates file `name` holding `bytes` (replacing any).
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String>;
    /// Reads `len` bytes of file `name` from `offset`.
    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Deletes file `name` (already gone is fine).
    fn remove(&self, name: &str);
}

/// [`SpillFiles`] in memory: for tests, and for a broker without a data directory.
#[derive(Debug, Default)]
pub struct MemorySpillFiles {
    files: Mutex<HashMap<String, Vec<u8>>>,
}

impl MemorySpillFiles {
    /// How many files exist now.
    pub fn file_count(&self) -> usize {
        self.files.lock().map_or(0, |files| files.len())
    }

    /// Flips one bit of byte `at` of every file (a damaged disk, in tests).
    pub fn damage_byte(&self, at: usize) {
        if let Ok(mut files) = self.files.lock() {
            for bytes in files.values_mut() {
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= 0x10;
                }
            }
        }
    }
}

impl SpillFiles for MemorySpillFiles {
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let mut files = self.files.lock().map_err(|_| "spill files poisoned".to_owned())?;
        files.insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let files = self.files.lock().map_err(|_| "spill files poisoned".to_owned())?;
        let bytes = files.get(name).ok_or_else(|| format!("no spill file {name}"))?;
        let start = usize::try_from(offset).map_err(|_| "offset out of range".to_owned())?;
        bytes.get(start..start + len).map(<[u8]>::to_vec).ok_or_else(|| format!("{name}: short read"))
    }

    fn remove(&self, name: &str) {
        if let Ok(mut files) = self.files.lock() {
            files.remove(name);
        }
    }
}

/// One far record: due, id, store id, TTL deadline, ready time, hot properties, location, body
/// size, delivery count, flags, then a CRC-32C of the rest.
pub(crate) const RECORD_BYTES: usize = 80;
/// Records a far tier buffers before it sorts them and writes them as a run (1.3 MB).
const RUN_RECORDS: usize = 16_384;
/// Records a load or a scan reads from a run at once (80 KB).
const READ_CHUNK: usize = 1024;
/// Records a listing first reads from each run (it reads on in growing chunks).
const LIST_CHUNK: usize = 16;
const NO_TIME: u64 = u64::MAX;
const REDELIVERED: u8 = 1;
const RETURNING: u8 = 2;

type Record = [u8; RECORD_BYTES];

/// A record that did not read back as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damaged;

/// The (due, id) a record is sorted by.
fn key_of(record: &[u8]) -> (u64, u64) {
    (u64_at(record, 0), u64_at(record, 8))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The record of a waiting message, if it can go far: paged out and stored.
fn encode(due: Timestamp, waiting: &Waiting) -> Option<Record> {
    let entry = &waiting.entry;
    let Payload::Paged(paged) = &entry.payload else { return None };
    let persist_id = entry.persist_id()?;
    let location = paged.location();
    let mut record = [0u8; RECORD_BYTES];
    let mut put = |at: usize, bytes: &[u8]| record[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &due.as_millis().to_le_bytes());
    put(8, &entry.seq.to_le_bytes());
    put(16, &persist_id.to_le_bytes());
    put(24, &entry.expires_at().map_or(NO_TIME, Timestamp::as_millis).to_le_bytes());
    put(32, &entry.ready_at().map_or(NO_TIME, Timestamp::as_millis).to_le_bytes());
    put(40, &entry.payload.hot().to_bits().to_le_bytes());
    put(48, &u32::try_from(location.segment).ok()?.to_le_bytes());
    put(52, &location.offset.to_le_bytes());
    put(56, &u32::try_from(entry.body_size()).ok()?.to_le_bytes());
    put(60, &location.record_bytes.to_le_bytes());
    put(64, &entry.delivery_count.to_le_bytes());
    let flags =
        if entry.redelivered { REDELIVERED } else { 0 } | if waiting.returning { RETURNING } else { 0 };
    put(68, &[flags]);
    let crc = crc32c::crc32c(&record[..72]);
    record[72..76].copy_from_slice(&crc.to_le_bytes());
    Some(record)
}

/// The waiting message a record holds, checksum verified.
fn decode(record: &[u8]) -> Result<(Timestamp, Waiting), Damaged> {
    if record.len() != RECORD_BYTES || crc32c::crc32c(&record[..72]) != u32_at(record, 72) {
        return Err(Damaged);
    }
    let time = |at| Some(u64_at(record, at)).filter(|ms| *ms != NO_TIME).map(Timestamp::from_millis);
    let location = RecordLocation {
        segment: u64::from(u32_at(record, 48)),
        offset: u32_at(record, 52),
        record_bytes: u32_at(record, 60),
    };
    let hot = Hot::from_bits(u64_at(record, 40));
    let paged = Paged::new(location, hot, u32_at(record, 56) as usize).ok_or(Damaged)?;
    let flags = record[68];
    let mut entry = Entry::with_payload(
        u64_at(record, 8),
        Payload::Paged(paged),
        time(32),
        time(24),
        Some(u64_at(record, 16)),
    );
    entry.delivery_count = u32_at(record, 64);
    entry.redelivered = flags & REDELIVERED != 0;
    let due = Timestamp::from_millis(u64_at(record, 0));
    Ok((due, Waiting { entry, returning: flags & RETURNING != 0 }))
}

/// A run: `len` records sorted by (due, id), read up to `cursor`, holding ids from `ids.0` to
/// `ids.1` (ids grow with publish order, so a lookup by id reads about one run, not all).
#[derive(Debug)]
struct Run {
    len: u64,
    cursor: u64,
    ids: (Seq, Seq),
}

/// A queue's far-future delayed messages, on disk.
#[derive(Debug)]
pub(crate) struct FarTier {
    files: Arc<dyn SpillFiles>,
    /// Names this tier's files: `<prefix>-<run number>.run`.
    prefix: String,
    /// Records not yet written, unsorted.
    buffer: Vec<Record>,
    buffer_first_due: Option<Timestamp>,
    runs: HashMap<u64, Run>,
    /// Each run's next record by due time (and the run's number).
    heads: BTreeSet<(Timestamp, u64)>,
    /// Records still in a run but cancelled: (run, index).
    cancelled: HashSet<(u64, u64)>,
    next_run: u64,
    count: usize,
    body_bytes: usize,
    /// A write failed: new messages stay in the near tier from then on.
    write_failed: bool,
    /// Records that did not read back intact, over the tier's life.
    pub damaged: u64,
    /// Records buffered before a run is written ([`RUN_RECORDS`]; smaller in tests).
    run_records: usize,
}

impl FarTier {
    pub fn new(files: Arc<dyn SpillFiles>, prefix: String) -> Self {
        FarTier {
            files,
            prefix,
            buffer: Vec::new(),
            buffer_first_due: None,
            runs: HashMap::new(),
            heads: BTreeSet::new(),
            cancelled: HashSet::new(),
            next_run: 0,
            count: 0,
            body_bytes: 0,
            write_failed: false,
            damaged: 0,
            run_records: RUN_RECORDS,
        }
    }

    /// The same tier writing runs of `records` (tests: many runs from few messages).
    #[cfg(test)]
    pub fn with_run_records(mut self, records: usize) -> Self {
        self.run_records = records.max(1);
        self
    }

    pub fn message_count(&self) -> usize {
        self.count
    }

    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// The earliest due time held.
    pub fn next_due(&self) -> Option<Timestamp> {
        let run_head = self.heads.first().map(|(due, _)| *due);
        [self.buffer_first_due, run_head].into_iter().flatten().min()
    }

    /// Takes a waiting message, or gives it back when it cannot go far: not paged out and
    /// stored, or a spill write failed before.
    pub fn push(&mut self, due: Timestamp, waiting: Waiting) -> Result<(), Waiting> {
        if self.write_failed {
            return Err(waiting);
        }
        let Some(record) = encode(due, &waiting) else { return Err(waiting) };
        self.buffer.push(record);
        self.buffer_first_due = Some(self.buffer_first_due.map_or(due, |first| first.min(due)));
        self.count += 1;
        self.body_bytes += waiting.entry.body_size();
        if self.buffer.len() >= self.run_records {
            self.write_run();
        }
        Ok(())
    }

    /// Sorts the buffer and writes it as a new run. On failure the records stay buffered (and
    /// load from there) and the tier takes no more.
    fn write_run(&mut self) {
        self.buffer.sort_unstable_by_key(|record| key_of(record));
        let number = self.next_run;
        let bytes = self.buffer.concat();
        if let Err(reason) = self.files.write(&self.file_name(number), &bytes) {
            tracing::warn!(%reason, "cannot write delayed messages to a spill file; they stay in memory");
            self.write_failed = true;
            return;
        }
        self.next_run += 1;
        let first_due = Timestamp::from_millis(key_of(&self.buffer[0]).0);
        let ids = self.buffer.iter().map(|record| key_of(record.as_slice()).1);
        let ids = ids.fold((Seq::MAX, Seq::MIN), |(low, high), id| (low.min(id), high.max(id)));
        self.runs.insert(number, Run { len: self.buffer.len() as u64, cursor: 0, ids });
        self.heads.insert((first_due, number));
        self.buffer = Vec::new();
        self.buffer_first_due = None;
    }

    fn file_name(&self, run: u64) -> String {
        format!("{}-{run}.run", self.prefix)
    }

    /// Moves the messages due before `until` into `out` in no particular order, at most `limit`
    /// of them from runs (the buffer is bounded and always emptied of them).
    pub fn load(&mut self, until: Timestamp, limit: usize, out: &mut Vec<(Timestamp, Waiting)>) {
        if self.buffer_first_due.is_some_and(|first| first < until) {
            let mut first = None;
            for record in std::mem::take(&mut self.buffer) {
                let due = Timestamp::from_millis(key_of(&record).0);
                if due < until {
                    self.take_record(&record, out);
                } else {
                    first = Some(first.map_or(due, |f: Timestamp| f.min(due)));
                    self.buffer.push(record);
                }
            }
            self.buffer_first_due = first;
        }
        let mut loaded = 0;
        while let Some(&(due, run)) = self.heads.first() {
            if due >= until || loaded >= limit {
                break;
            }
            self.heads.pop_first();
            loaded += self.load_run(run, until, limit - loaded, out);
        }
    }

    /// Reads run `run` from its cursor while records are due before `until`, `limit` at most;
    /// files the run's new head, or deletes the run once read through. Returns how many came.
    fn load_run(
        &mut self,
        run: u64,
        until: Timestamp,
        limit: usize,
        out: &mut Vec<(Timestamp, Waiting)>,
    ) -> usize {
        let Some(&Run { len, mut cursor, ids }) = self.runs.get(&run) else { return 0 };
        let mut loaded = 0;
        let mut head = None;
        'chunks: while cursor < len {
            let chunk = match self.read_records(run, cursor, (len - cursor).min(READ_CHUNK as u64)) {
                Ok(chunk) => chunk,
                Err(reason) => {
                    tracing::warn!(run, %reason, "cannot read a spill file; its delayed messages wait for the next restart");
                    self.drop_unreadable(run, cursor, len);
                    return loaded;
                }
            };
            for record in chunk.chunks_exact(RECORD_BYTES) {
                // A cancelled record is passed whatever its due time: the run's head is always
                // a message still held.
                if self.cancelled.remove(&(run, cursor)) {
                    cursor += 1;
                    continue;
                }
                let due = Timestamp::from_millis(key_of(record).0);
                if due >= until || loaded >= limit {
                    head = Some(due);
                    break 'chunks;
                }
                cursor += 1;
                self.take_record(record, out);
                loaded += 1;
            }
        }
        match head {
            Some(due) => {
                self.runs.insert(run, Run { len, cursor, ids });
                self.heads.insert((due, run));
            }
            None => self.delete_run(run),
        }
        loaded
    }

    /// Forgets run `run` and deletes its file (read through, or unreadable).
    fn delete_run(&mut self, run: u64) {
        self.runs.remove(&run);
        self.files.remove(&self.file_name(run));
    }

    /// Counts out one record and hands its message over (or counts it damaged).
    fn take_record(&mut self, record: &[u8], out: &mut Vec<(Timestamp, Waiting)>) {
        self.count -= 1;
        match decode(record) {
            Ok((due, waiting)) => {
                self.body_bytes -= waiting.entry.body_size();
                out.push((due, waiting));
            }
            Err(Damaged) => {
                // The size field may be what is damaged: the byte count drifts rather than wraps.
                self.body_bytes = self.body_bytes.saturating_sub(u32_at(record, 56) as usize);
                self.damaged += 1;
                tracing::error!(
                    queue_files = %self.prefix,
                    "a delayed message's spill record is damaged; it waits in the log for the next restart"
                );
            }
        }
    }

    /// Forgets the rest of a run that cannot be read (its messages stay in the store's log).
    fn drop_unreadable(&mut self, run: u64, from: u64, len: u64) {
        let lost = (from..len).filter(|at| !self.cancelled.remove(&(run, *at))).count();
        self.count -= lost;
        self.damaged += lost as u64;
        self.delete_run(run);
    }

    fn read_records(&self, run: u64, from: u64, count: u64) -> Result<Vec<u8>, String> {
        let bytes = self.files.read_at(
            &self.file_name(run),
            from * RECORD_BYTES as u64,
            count as usize * RECORD_BYTES,
        )?;
        Ok(bytes)
    }

    fn key_at(&self, run: u64, at: u64) -> Result<(u64, u64), String> {
        Ok(key_of(&self.read_records(run, at, 1)?))
    }

    /// The first index at or after the run's cursor whose key is not `before` (a binary search
    /// by positioned reads: the run is sorted).
    fn first_not(&self, run: u64, before: impl Fn((u64, u64)) -> bool) -> Result<u64, String> {
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

    /// Takes out the message (`due`, `id`), if held.
    pub fn remove(&mut self, due: Timestamp, id: Seq) -> Option<Waiting> {
        let key = (due.as_millis(), id);
        if let Some(at) = self.buffer.iter().position(|record| key_of(record) == key) {
            let record = self.buffer.swap_remove(at);
            self.buffer_first_due = self.buffer.iter().map(|r| Timestamp::from_millis(key_of(r).0)).min();
            let mut out = Vec::new();
            self.take_record(&record, &mut out);
            return out.pop().map(|(_, waiting)| waiting);
        }
        let runs: Vec<u64> = self.runs.keys().copied().collect();
        for run in runs {
            let Ok(at) = self.first_not(run, |k| k < key) else { continue };
            let Some(len) = self.runs.get(&run).map(|r| r.len) else { continue };
            if at >= len || self.cancelled.contains(&(run, at)) {
                continue;
            }
            let Ok(record) = self.read_records(run, at, 1) else { continue };
            if key_of(&record) != key {
                continue;
            }
            let Ok((_, waiting)) = decode(&record) else { continue };
            self.count -= 1;
            self.body_bytes -= waiting.entry.body_size();
            if self.runs.get(&run).is_some_and(|r| r.cursor == at) {
                self.pass_head(run, at, due);
            } else {
                self.cancelled.insert((run, at));
            }
            return Some(waiting);
        }
        None
    }

    /// Moves run `run`'s cursor past its head record at `at` (due at `due`, just removed) and any
    /// cancelled records behind it, as a load that takes nothing does, so that the run's filed
    /// head is a message still held (a cancelled head would make `next_due` and the load deadline
    /// name a message that is gone).
    fn pass_head(&mut self, run: u64, at: u64, due: Timestamp) {
        self.heads.remove(&(due, run));
        self.cancelled.insert((run, at));
        self.load_run(run, Timestamp::from_millis(0), 0, &mut Vec::new());
    }

    /// The due time of message `id`: a scan of the runs whose ids span it (usually one).
    pub fn due_of(&self, id: Seq) -> Option<Timestamp> {
        if let Some(record) = self.buffer.iter().find(|record| key_of(record.as_slice()).1 == id) {
            return Some(Timestamp::from_millis(key_of(record).0));
        }
        for (&run, r) in self.runs.iter().filter(|(_, r)| (r.ids.0..=r.ids.1).contains(&id)) {
            let mut at = r.cursor;
            while at < r.len {
                let count = (r.len - at).min(READ_CHUNK as u64);
                let Ok(chunk) = self.read_records(run, at, count) else { break };
                for (i, record) in chunk.chunks_exact(RECORD_BYTES).enumerate() {
                    let (due, seq) = key_of(record);
                    if seq == id && !self.cancelled.contains(&(run, at + i as u64)) {
                        return Some(Timestamp::from_millis(due));
                    }
                }
                at += count;
            }
        }
        None
    }

    /// Up to `limit` messages after `cursor` in (due, id) order, without taking them: a merge of
    /// the buffer and every run from the cursor on, reading each run a few records at a time,
    /// so a page costs about `limit` records plus a binary search and one small read per run.
    pub fn after(&self, cursor: Option<(Timestamp, Seq)>, limit: usize) -> Vec<(Timestamp, Waiting)> {
        let after = cursor.map(|(due, id)| (due.as_millis(), id));
        let mut buffered: Vec<&Record> =
            self.buffer.iter().filter(|r| after.is_none_or(|a| key_of(r.as_slice()) > a)).collect();
        buffered.sort_unstable_by_key(|r| key_of(r.as_slice()));
        let mut readers: Vec<RunReader> = Vec::new();
        for (&run, r) in &self.runs {
            let from = match after {
                Some(a) => match self.first_not(run, |k| k <= a) {
                    Ok(from) => from,
                    Err(_) => continue,
                },
                None => r.cursor,
            };
            readers.push(RunReader { run, at: from, end: r.len, chunk: Vec::new(), pos: 0 });
        }
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
            let Some(std::cmp::Reverse((_, source))) = heads.pop() else { break };
            let message = if source == readers.len() {
                let message = decode(buffered[next_buffered].as_slice());
                next_buffered += 1;
                if let Some(next) = buffered.get(next_buffered) {
                    heads.push(std::cmp::Reverse((key_of(next.as_slice()), source)));
                }
                message
            } else {
                let reader = &mut readers[source];
                let (message, at) = reader.take();
                let cancelled = self.cancelled.contains(&(reader.run, at));
                if let Some(key) = reader.peek(self) {
                    heads.push(std::cmp::Reverse((key, source)));
                }
                if cancelled {
                    continue;
                }
                message
            };
            if let Ok(message) = message {
                found.push(message);
            }
        }
        found
    }
}

/// A run read forward for a listing: a small chunk at a time, growing as it is used.
struct RunReader {
    run: u64,
    at: u64,
    end: u64,
    chunk: Vec<u8>,
    pos: usize,
}

impl RunReader {
    /// The key of the next record, reading a chunk when the last one is used up (`None`: the
    /// run ends here, or cannot be read).
    fn peek(&mut self, tier: &FarTier) -> Option<(u64, u64)> {
        if self.pos == self.chunk.len() {
            let read_so_far = self.chunk.len() / RECORD_BYTES;
            let count = (self.end - self.at).min((read_so_far * 2).clamp(LIST_CHUNK, READ_CHUNK) as u64);
            if count == 0 {
                return None;
            }
            self.chunk = tier.read_records(self.run, self.at, count).ok()?;
            self.pos = 0;
        }
        Some(key_of(&self.chunk[self.pos..self.pos + RECORD_BYTES]))
    }

    /// The message of the record `peek` looked at, and its index in the run.
    fn take(&mut self) -> (Result<(Timestamp, Waiting), Damaged>, u64) {
        let record = decode(&self.chunk[self.pos..self.pos + RECORD_BYTES]);
        let at = self.at;
        self.pos += RECORD_BYTES;
        self.at += 1;
        (record, at)
    }
}

impl Drop for FarTier {
    /// The queue is gone (or the broker): its spill files go with it.
    fn drop(&mut self) {
        for run in self.runs.keys() {
            self.files.remove(&self.file_name(*run));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Hot;

    fn paged(seq: Seq, body_size: usize) -> Waiting {
        let location = RecordLocation { segment: 3, offset: 64 * seq as u32, record_bytes: 100 };
        let paged = Paged::new(location, Hot::new(Some(5_000), 2, true), body_size).unwrap();
        let mut entry = Entry::with_payload(seq, Payload::Paged(paged), None, None, Some(1000 + seq));
        entry.delivery_count = 3;
        Waiting { entry, returning: false }
    }

    fn tier() -> (Arc<MemorySpillFiles>, FarTier) {
        let files = Arc::new(MemorySpillFiles::default());
        (files.clone(), FarTier::new(files, "q1".to_owned()))
    }

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// A record reads back as the waiting message it was made of; a flipped bit is caught.
    #[test]
    fn records_round_trip_and_damage_is_caught() {
        let mut waiting = paged(7, 16);
        waiting.entry.redelivered = true;
        waiting.returning = true;
        let mut record = encode(t(123), &waiting).unwrap();
        let (due, back) = decode(&record).unwrap();
        assert_eq!(due, t(123));
        assert_eq!(back.entry.seq, 7);
        assert_eq!(back.entry.persist_id(), Some(1007));
        assert_eq!(back.entry.body_size(), 16);
        assert_eq!((back.entry.delivery_count, back.entry.redelivered, back.returning), (3, true, true));
        assert!(matches!(back.entry.payload, Payload::Paged(p) if p.location().offset == 64 * 7));
        assert_eq!(back.entry.payload.hot().expiration_ms(), Some(5_000));
        record[50] ^= 1;
        assert_eq!(decode(&record).err(), Some(Damaged));
    }

    /// A resident or unstored message cannot go far: it is given back.
    #[test]
    fn only_stored_paged_messages_go_far() {
        let (_, mut far) = tier();
        let message = crate::message::Message::new(
            Default::default(),
            Default::default(),
            Default::default(),
            vec![1u8; 2].into(),
        );
        let resident =
            Waiting { entry: Entry::new(1, Arc::new(message), None, None, Some(5)), returning: false };
        assert!(far.push(t(10), resident).is_err());
        let mut unstored = paged(2, 1);
        unstored.entry = Entry::with_payload(2, unstored.entry.payload.clone(), None, None, None);
        assert!(far.push(t(10), unstored).is_err());
        assert_eq!(far.message_count(), 0);
    }

    /// Many runs load back in due order with ties in id order, only what is due before the
    /// bound, at most the limit per load; read-through runs are deleted.
    #[test]
    fn loads_in_due_order_across_runs() {
        let (files, mut far) = tier();
        let n = RUN_RECORDS as u64 * 2 + 100;
        // Due times go round a 1,000 ms cycle so that every run holds every due time.
        for seq in 0..n {
            far.push(t(10_000 + (seq * 37) % 1000), paged(seq, 2)).unwrap();
        }
        assert_eq!(
            (far.message_count(), far.body_bytes(), files.file_count()),
            (n as usize, 2 * n as usize, 2)
        );
        assert_eq!(far.next_due(), Some(t(10_000)));
        let mut out = Vec::new();
        far.load(t(10_000), usize::MAX, &mut out);
        assert!(out.is_empty(), "nothing is due before the first due time");
        let mut all = Vec::new();
        loop {
            let mut out = Vec::new();
            far.load(t(10_500), 5_000, &mut out);
            assert!(out.len() <= 5_000 + 100, "a load is bounded (the buffer aside)");
            if out.is_empty() {
                break;
            }
            all.extend(out);
        }
        assert!(all.iter().all(|(due, _)| *due < t(10_500)));
        assert_eq!(far.next_due(), Some(t(10_500)));
        far.load(t(20_000), usize::MAX, &mut all);
        assert_eq!(all.len(), n as usize);
        assert_eq!((far.message_count(), far.body_bytes(), files.file_count()), (0, 0, 0));
        let mut keys: Vec<(Timestamp, Seq)> = all.iter().map(|(d, w)| (*d, w.entry.seq)).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n as usize, "each message comes back once");
    }

    /// A removed message (in the buffer or in a run) is no longer counted, listed or loaded;
    /// the others are.
    #[test]
    fn removed_messages_do_not_come_back() {
        let (_, mut far) = tier();
        let n = RUN_RECORDS as u64 + 10;
        for seq in 0..n {
            far.push(t(1_000 + seq), paged(seq, 1)).unwrap();
        }
        let in_run = far.remove(t(1_005), 5).unwrap();
        assert_eq!(in_run.entry.seq, 5);
        let in_buffer = far.remove(t(1_000 + n - 1), n - 1).unwrap();
        assert_eq!(in_buffer.entry.seq, n - 1);
        assert!(far.remove(t(1_005), 5).is_none(), "removed once");
        assert!(far.remove(t(1_006), 5).is_none(), "the due time is part of the key");
        assert_eq!(far.message_count(), n as usize - 2);
        assert_eq!(far.due_of(6), Some(t(1_006)));
        assert_eq!(far.due_of(5), None);
        let listed: Vec<Seq> = far.after(Some((t(1_003), 3)), 3).iter().map(|(_, w)| w.entry.seq).collect();
        assert_eq!(listed, vec![4, 6, 7]);
        let mut out = Vec::new();
        far.load(t(u64::MAX / 2), usize::MAX, &mut out);
        assert_eq!(out.len(), n as usize - 2);
        assert!(out.iter().all(|(_, w)| w.entry.seq != 5 && w.entry.seq != n - 1));
    }

    /// A listing paged through with its cursor gives every message once, in (due, id) order,
    /// across several runs and the buffer; a lookup by id finds one in any run.
    #[test]
    fn listings_page_through_every_run_in_order() {
        let (_, mut far) = tier();
        let n = RUN_RECORDS as u64 * 3 + 50;
        for seq in 0..n {
            far.push(t(10_000 + (seq * 37) % 1000), paged(seq, 1)).unwrap();
        }
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let page = far.after(cursor, 4_000);
            let Some((due, last)) = page.last() else { break };
            cursor = Some((*due, last.entry.seq));
            listed.extend(page.iter().map(|(due, w)| (*due, w.entry.seq)));
        }
        let mut all: Vec<(Timestamp, Seq)> = (0..n).map(|seq| (t(10_000 + (seq * 37) % 1000), seq)).collect();
        all.sort();
        assert_eq!(listed, all);
        assert_eq!(
            far.due_of(RUN_RECORDS as u64 + 7),
            Some(t(10_000 + ((RUN_RECORDS as u64 + 7) * 37) % 1000))
        );
        assert_eq!(far.due_of(n + 1), None);
    }

    /// A damaged record is counted and left out (its message is still in the store's log);
    /// the rest load.
    #[test]
    fn a_damaged_record_is_left_out() {
        let (files, mut far) = tier();
        for seq in 0..RUN_RECORDS as u64 {
            far.push(t(1_000), paged(seq, 1)).unwrap();
        }
        files.damage_byte(RECORD_BYTES * 3 + 20);
        let mut out = Vec::new();
        far.load(t(2_000), usize::MAX, &mut out);
        assert_eq!((out.len(), far.damaged, far.message_count()), (RUN_RECORDS - 1, 1, 0));
    }

    /// Dropping the tier (its queue deleted) deletes its files.
    #[test]
    fn dropping_the_tier_deletes_its_files() {
        let (files, mut far) = tier();
        for seq in 0..RUN_RECORDS as u64 {
            far.push(t(1_000), paged(seq, 1)).unwrap();
        }
        assert_eq!(files.file_count(), 1);
        drop(far);
        assert_eq!(files.file_count(), 0);
    }
}
