//! The far tier's files (ADR 0013): what a far tier needs of them (the injected [`SpillFiles`],
//! the server's is a directory of `<data-dir>/delays`), and [`MemorySpillFiles`] for tests (with
//! the ways a disk or an operator damages files) and for a broker without a data directory.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Files a far tier writes once and reads back by position. Writes and deletes are called from
/// the broker's thread (keep them quick: the server's hands writes to a thread of its own), reads
/// from the driver's threads too. The server's is a directory emptied at start.
pub trait SpillFiles: Send + Sync + fmt::Debug {
    /// Creates file `name` holding `bytes` (replacing any). It may be written later, by another
    /// thread, as long as reads see it at once.
    fn write(&self, name: &str, bytes: Vec<u8>) -> Result<(), String>;
    /// Reads `len` bytes of file `name` from `offset`: for loads by the driver (`spill_reads.rs`)
    /// and for the HTTP API's listings of delayed messages (`admin/delayed_listing.rs`), off the
    /// broker's thread. Shared by several threads at once.
    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Deletes file `name` (already gone is fine).
    fn remove(&self, name: &str);
    /// Records a far tier buffers before it writes them as a run (`far_delays.rs`).
    fn run_records(&self) -> usize {
        super::far_delays::RUN_RECORDS
    }
}

/// [`SpillFiles`] in memory: for tests (with ways to damage them), and for a broker without a
/// data directory.
#[derive(Debug, Default)]
pub struct MemorySpillFiles {
    files: Mutex<HashMap<String, Vec<u8>>>,
    /// Writes fail (a directory replaced by a plain file, a full disk).
    refuse_writes: AtomicBool,
    /// Records per run, when not the usual ([`SpillFiles::run_records`]).
    run_records: Option<usize>,
    /// Reads made so far.
    reads: AtomicU64,
}

impl MemorySpillFiles {
    /// Files for far tiers that write runs of `records` (tests: many runs from few messages).
    pub fn with_run_records(records: usize) -> Self {
        MemorySpillFiles { run_records: Some(records.max(1)), ..MemorySpillFiles::default() }
    }

    /// How many reads were made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// How many files exist now.
    pub fn file_count(&self) -> usize {
        self.files.lock().map_or(0, |files| files.len())
    }

    /// Flips one bit of byte `at` of every file (a damaged disk, in tests).
    pub fn damage_byte(&self, at: usize) {
        self.damage_bytes(at, 1);
    }

    /// Flips one bit of `count` bytes of every file from byte `at` on.
    pub fn damage_bytes(&self, at: usize, count: usize) {
        self.edit_files(|bytes| {
            for byte in bytes.iter_mut().skip(at).take(count) {
                *byte ^= 0x10;
            }
        });
    }

    /// Cuts every file to half its length.
    pub fn truncate_to_half(&self) {
        self.edit_files(|bytes| bytes.truncate(bytes.len() / 2));
    }

    /// Deletes every file behind the broker's back.
    pub fn delete_all(&self) {
        if let Ok(mut files) = self.files.lock() {
            files.clear();
        }
    }

    /// Makes every write fail from now on (`true`), or succeed again.
    pub fn refuse_writes(&self, refuse: bool) {
        self.refuse_writes.store(refuse, Ordering::SeqCst);
    }

    fn edit_files(&self, edit: impl Fn(&mut Vec<u8>)) {
        if let Ok(mut files) = self.files.lock() {
            files.values_mut().for_each(edit);
        }
    }
}

impl SpillFiles for MemorySpillFiles {
    fn write(&self, name: &str, bytes: Vec<u8>) -> Result<(), String> {
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(format!("{name}: writes refused"));
        }
        let mut files = self.files.lock().map_err(|_| "spill files poisoned".to_owned())?;
        files.insert(name.to_owned(), bytes);
        Ok(())
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.reads.fetch_add(1, Ordering::SeqCst);
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

    fn run_records(&self) -> usize {
        self.run_records.unwrap_or(super::far_delays::RUN_RECORDS)
    }
}
